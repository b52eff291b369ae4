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
  for (const char* bad : {R"([{"impl": "a"}])", R"([{"impl": 1, "property": "P"}])"}) {
    write(bad);
    EXPECT_EQ(error_of(path), path + ": every entry needs string fields 'impl' and 'property'")
        << bad;
  }
  write("[3]");
  EXPECT_EQ(error_of(path),
            path + ": entry 0: expected an object with 'impl' and 'property' or 'cause'");
  write("[");
  EXPECT_EQ(error_of(path).rfind(path + ": ", 0), 0u);
}

TEST_F(ExpectedFailuresTest, AFindingsFixtureIsRelativeToTheListsFolder) {
  // The list reads the same from any working directory: its fixtures lie
  // beside it, as an include beside its file (ci/test's cli script runs in
  // a temporary folder with the project's list and fixtures copied there).
  fs::create_directories(dir_ / "ggml");
  std::ofstream(dir_ / "ggml" / "case.json") << "{}";
  const std::string path = write(R"([{"impl": ["x_*", "y"], "cause": "empty_row_nan",
      "finding": "F9", "reason": "NaN rows", "fixture": "ggml/case.json"}])");
  const ExpectedFailures e = load_expected_failures(path);
  ASSERT_EQ(e.findings.size(), 1u);
  EXPECT_EQ(e.findings[0].finding.fixture, (dir_ / "ggml" / "case.json").string());
  EXPECT_EQ(e.findings_for("x_f16", "MatchesOracle").size(), 1u);
  EXPECT_EQ(e.findings_for("z", "MatchesOracle").size(), 0u);
  // A path that names a file only from the working directory is refused.
  write(R"([{"impl": "x", "cause": "empty_row_nan", "finding": "F9", "reason": "r",
      "fixture": "fixtures/expected-failures.json"}])");
  EXPECT_EQ(error_of(path), path + ": entry 0: field 'fixture': '" +
                                (dir_ / "fixtures/expected-failures.json").string() +
                                "' is not a readable regular file");
}

TEST_F(ExpectedFailuresTest, AnEntryUnlessTheCpuHasFeaturesHoldsOnlyWhereOneIsMissing) {
  // LibTorch's bf16 products take another path without AVX512BW/VL/DQ: the
  // finding holds there and nowhere else, asked of this machine.
  __builtin_cpu_init();
  const bool has_all = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                       __builtin_cpu_supports("avx512dq");
  const std::string path = write(R"([
    {"impl": "a", "property": "P", "reason": "everywhere"},
    {"impl": "b", "property": "Q", "reason": "without AVX-512",
     "unless_cpu_has": ["avx512bw", "avx512vl", "avx512dq"]},
    {"impl": "c", "property": "R", "reason": "never on x86-64", "unless_cpu_has": ["fma", "fma"]}])");
  const ExpectedFailures e = load_expected_failures(path);
  EXPECT_TRUE(e.expects("a", "P"));
  EXPECT_EQ(e.expects("b", "Q"), !has_all);
  EXPECT_EQ(e.expects("c", "R"), !__builtin_cpu_supports("fma"));
}

// The Linux kernel's own reading of AMX (the cpuinfo flag appears where
// the CPU has it and the kernel enables its tile state).
bool cpuinfo_has(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

TEST_F(ExpectedFailuresTest, AnEntryIfTheCpuHasFeaturesHoldsOnlyWhereAllArePresent) {
  // LibTorch-3 dies only where oneDNN runs bf16 products on AMX's tiles.
  __builtin_cpu_init();
  const std::string path = write(R"([
    {"impl": "a", "property": "P", "reason": "with AMX", "if_cpu_has": ["amx_bf16"]},
    {"impl": "b", "property": "Q", "reason": "with FMA", "if_cpu_has": ["fma", "avx2"]},
    {"impl": "c", "property": "R", "reason": "both", "if_cpu_has": ["fma"], "unless_cpu_has": ["fma"]}])");
  const ExpectedFailures e = load_expected_failures(path);
  EXPECT_EQ(e.expects("a", "P"), cpuinfo_has("amx_bf16") && cpuinfo_has("amx_tile"));
  EXPECT_EQ(e.expects("b", "Q"), __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"));
  EXPECT_FALSE(e.expects("c", "R"));
}

TEST_F(ExpectedFailuresTest, AnUnknownCpuFeatureIsOneLineNamingTheEntry) {
  std::string path = write(R"([{"impl": "a", "property": "P", "unless_cpu_has": ["avx1024"]}])");
  EXPECT_EQ(error_of(path), path + ": entry 0: field 'unless_cpu_has': unknown CPU feature "
                                   "\"avx1024\" (known: avx2, fma, avx512f, avx512bw, "
                                   "avx512vl, avx512dq, amx_tile, amx_bf16)");
  path = write(R"([{"impl": "a", "property": "P"}, {"impl": "a", "property": "Q", "unless_cpu_has": "fma"}])");
  EXPECT_EQ(error_of(path),
            path + ": entry 1: field 'unless_cpu_has': expected a non-empty array of CPU feature names");
}

}  // namespace
}  // namespace attncheck
