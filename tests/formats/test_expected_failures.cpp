// The expected-failures list (SPEC 5.2): both of its forms, a missing file,
// and one line naming the file for anything else.

#include "attncheck/fixture.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "attncheck/dtype.h"

namespace attncheck {
namespace {

namespace fs = std::filesystem;

class ExpectedFailuresTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attncheck-test-expected-failures-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& text) {
    const std::string path = (dir_ / "expected-failures.json").string();
    std::ofstream(path) << text;
    return path;
  }
  static std::string error_of(const std::string& path) {
    try {
      load_expected_failures(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(ExpectedFailuresTest, AMissingFileExpectsNothing) {
  const std::string path = (dir_ / "none.json").string();
  const ExpectedFailures e = load_expected_failures(path);
  EXPECT_TRUE(e.entries.empty());
  EXPECT_EQ(e.path, path);
}

TEST_F(ExpectedFailuresTest, ReadsAnArrayOrAnObjectHoldingOne) {
  const std::string entries =
      R"([{"impl": "a", "property": "P", "reason": "upstream"}, {"impl": "b", "property": "Q"}])";
  for (const std::string& text : {entries, R"({"expected_failures": )" + entries + "}"}) {
    const std::string path = write(text);
    const ExpectedFailures e = load_expected_failures(path);
    EXPECT_EQ(e.path, path);
    EXPECT_EQ(e.entries.size(), 2u);
    EXPECT_TRUE(e.expects("a", "P"));
    EXPECT_TRUE(e.expects("b", "Q"));
    EXPECT_FALSE(e.expects("a", "Q"));
  }
}

TEST_F(ExpectedFailuresTest, AnythingElseIsOneLineNamingTheFile) {
  const std::string path = write("{}");
  EXPECT_EQ(error_of(path), path + ": expected an array of {impl, property, reason}");
  for (const char* bad : {R"([{"impl": "a"}])", R"([{"impl": 1, "property": "P"}])", "[3]"}) {
    write(bad);
    EXPECT_EQ(error_of(path), path + ": every entry needs string fields 'impl' and 'property'")
        << bad;
  }
  write("[");
  EXPECT_EQ(error_of(path).rfind(path + ": ", 0), 0u);
}

}  // namespace
}  // namespace attncheck
