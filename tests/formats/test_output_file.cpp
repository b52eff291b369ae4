// Output files: devices written in place (never replaced), directories and
// unwritable places refused before any work, regular files replaced
// atomically, no temporary file left behind.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/error.h"
#include "formats/output_file.h"

namespace attncheck {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir() {
  const fs::path d = fs::temp_directory_path() / ("attncheck-out-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(OutputFile, ADeviceIsWrittenInPlaceNeverReplaced) {
  write_output_file("/dev/null", "{}\n", "--report");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(OutputFile, ARegularFileIsReplacedAndNoTemporaryRemains) {
  const fs::path d = fresh_dir();
  const fs::path f = d / "report.json";
  write_output_file(f.string(), "first\n", "--report");
  write_output_file(f.string(), "second\n", "--report");
  EXPECT_EQ(read(f), "second\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
  fs::remove_all(d);
}

TEST(OutputFile, ASymbolicLinkIsFollowedNotReplaced) {
  const fs::path d = fresh_dir();
  write_output_file((d / "real.json").string(), "old\n", "--report");
  fs::create_symlink(d / "real.json", d / "link.json");
  write_output_file((d / "link.json").string(), "new\n", "--report");
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  EXPECT_EQ(read(d / "real.json"), "new\n");
  fs::remove_all(d);
}

TEST(OutputFile, DirectoriesAndMissingDirectoriesAreRefusedBeforeAnyWork) {
  const fs::path d = fresh_dir();
  try {
    check_output_path(d.string(), "--report");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--report: cannot write '" + d.string() + "': it is a directory");
  }
  EXPECT_THROW(check_output_path((d / "no" / "such" / "r.json").string(), "--report"), InputError);
  EXPECT_THROW(write_output_file((d / "no" / "r.json").string(), "x", "--report"), InputError);
  EXPECT_THROW(check_output_path("", "--report"), InputError);
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 0);
  fs::remove_all(d);
}

}  // namespace
}  // namespace attncheck
