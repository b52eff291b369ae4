// Output files: absent or a regular file with one link. FIFOs, devices,
// directories, symbolic links and hard-linked files refused before any work
// and again at write time (never opened, never blocking); regular files
// replaced atomically with their mode kept, no temporary file left behind.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/dtype.h"
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

// The message of the InputError `f` throws, or "" when it throws none.
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OutputFile, ADeviceIsRefusedNeverWritten) {
  EXPECT_EQ(refusal([] { check_output_path("/dev/null", "--report"); }),
            "--report: cannot write '/dev/null': it is a character device, not a regular file");
  EXPECT_EQ(refusal([] { write_output_file("/dev/null", "{}\n", "--report"); }),
            "--report: cannot write '/dev/null': it is a character device, not a regular file");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(OutputFile, AFifoIsRefusedAtCheckAndAtWriteTime) {
  const fs::path d = fresh_dir();
  const fs::path f = d / "fifo.json";
  ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
  // A reader, so that code which opened the FIFO would not block the test.
  const int reader = ::open(f.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const std::string why = "--report: cannot write '" + f.string() + "': it is a FIFO, not a regular file";
  EXPECT_EQ(refusal([&] { check_output_path(f.string(), "--report"); }), why);
  EXPECT_EQ(refusal([&] { write_output_file(f.string(), "x", "--report"); }), why);
  char c;
  EXPECT_EQ(::read(reader, &c, 1), 0) << "the FIFO was written";
  ::close(reader);
  // Made a FIFO after the check before the work: refused when written.
  const fs::path later = d / "later.json";
  check_output_path(later.string(), "--report");
  ASSERT_EQ(::mkfifo(later.c_str(), 0600), 0);
  const int later_reader = ::open(later.c_str(), O_RDONLY | O_NONBLOCK);
  EXPECT_NE(refusal([&] { write_output_file(later.string(), "x", "--report"); }), "");
  ::close(later_reader);
  fs::remove_all(d);
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

TEST(OutputFile, SymbolicLinksLiveOrDanglingAreRefusedNotFollowed) {
  const fs::path d = fresh_dir();
  write_output_file((d / "real.json").string(), "old\n", "--report");
  fs::create_symlink(d / "real.json", d / "link.json");
  fs::create_symlink(d / "nowhere.json", d / "dangling.json");
  for (const char* name : {"link.json", "dangling.json"}) {
    const std::string path = (d / name).string();
    const std::string why = "--report: cannot write '" + path + "': it is a symbolic link; name the file itself";
    EXPECT_EQ(refusal([&] { check_output_path(path, "--report"); }), why);
    EXPECT_EQ(refusal([&] { write_output_file(path, "new\n", "--report"); }), why);
    EXPECT_TRUE(fs::is_symlink(d / name));
  }
  EXPECT_EQ(read(d / "real.json"), "old\n");
  EXPECT_FALSE(fs::exists(d / "nowhere.json"));
  fs::remove_all(d);
}

TEST(OutputFile, AFileWithTwoHardLinksIsRefused) {
  const fs::path d = fresh_dir();
  write_output_file((d / "a.json").string(), "old\n", "--junit");
  fs::create_hard_link(d / "a.json", d / "b.json");
  const std::string path = (d / "a.json").string();
  EXPECT_EQ(refusal([&] { write_output_file(path, "new\n", "--junit"); }),
            "--junit: cannot write '" + path + "': it has 2 hard links, and replacing it would "
            "split them; name a file with one link");
  EXPECT_EQ(read(d / "b.json"), "old\n");
  EXPECT_EQ(fs::hard_link_count(d / "a.json"), 2u);
  fs::remove_all(d);
}

TEST(OutputFile, AReplacedFileKeepsItsMode) {
  const fs::path d = fresh_dir();
  const fs::path f = d / "report.json";
  write_output_file(f.string(), "first\n", "--report");
  ASSERT_EQ(::chmod(f.c_str(), 0640), 0);
  const mode_t mask = ::umask(022);
  write_output_file(f.string(), "second\n", "--report");
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(read(f), "second\n");
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
