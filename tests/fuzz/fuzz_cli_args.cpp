// Fuzz target "cli_args": the command line's argument parsing (CLI11 and
// the parsers of --seed, --shard, --dtype, --profile, ...), every
// subcommand, through run_cli in-process.
//
// The input is text, one argument per line; the first is the subcommand.
// The scratch directory holds files to name: problem.json, fixture.json,
// report.json (valid), bad.json (not JSON), empty.json, dir/ (a directory).
//
// Kept bounded and inside the scratch directory (an input breaking these
// rules is skipped, not failed): no absolute paths or "..", no --plugin (it
// would dlopen whatever it names), no bench, no broken implementation
// (shrinking one takes seconds); `check` gets at most one --impl and one
// --property (default loop_f64 and MatchesOracle), never --cases (always 1)
// and always --no-isolation and --no-real-sizes (the real-size phase is
// seconds to minutes of arithmetic, not argument parsing: ctest runs it;
// a thorough one over packed batches of 16 sequences timed the fuzzer out).
//
// Contract: exit 0, 1 or 2; exit 2 is one line on stderr (fuzz_target.cpp).

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_target.h"

namespace attncheck::fuzz {
namespace {

constexpr std::string_view kProblem = R"({"format": "attncheck-problem-1", "dtype": "f64",
  "batch": 1, "heads": 1, "tq": 2, "tk": 2, "dk": 1, "dv": 1,
  "q": [1, -1], "k": [0.5, 2], "v": [3, -4], "causal": true})";

constexpr std::string_view kFixture = R"({"format": "attncheck-fixture-1",
  "problem": {"format": "attncheck-problem-1", "dtype": "f64", "batch": 1, "heads": 1,
              "tq": 1, "tk": 2, "dk": 1, "dv": 1, "q": [1], "k": [0, 1], "v": [1, 2]},
  "args": {"row": [0, 0, 0]}, "expected": null,
  "meta": {"property": "CausalPrefixIndependence", "impl": "loop_f64", "dtype": "f64",
           "seed": 1, "reproduce": "", "attncheck": "0.1.0"}})";

constexpr std::string_view kReport = R"({"format": "attncheck-report-1", "attncheck": "0.1.0",
  "seed": 20260101, "profile": "ci", "results": []})";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The option name of "--name" or "--name=value".
std::string_view option_name(std::string_view token) {
  return token.substr(0, token.find('='));
}

// Splits the input into arguments; false if the input breaks the rules.
bool arguments(std::string_view text, std::vector<std::string>& args) {
  if (text.size() > 2048) return false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    args.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (args.size() > 24) return false;
  for (const std::string& a : args) {
    for (const char c : a)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    if (starts_with(a, "/") || starts_with(a, "~") || a.find("..") != std::string::npos ||
        starts_with(a, "--plugin") || a == "bench" || a.find("broken") != std::string::npos) {
      return false;
    }
  }
  return true;
}

void run(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  if (!arguments(std::string_view(reinterpret_cast<const char*>(data), size), args)) return;
  if (std::find(args.begin(), args.end(), "check") != args.end()) {
    int impls = 0, properties = 0;
    bool thorough = false, variance = false;
    for (const std::string& a : args) {
      const std::string_view name = option_name(a);
      if (name == "--cases") return;
      impls += name == "--impl";
      properties += name == "--property";
      thorough |= a.find("thorough") != std::string::npos;
      variance |= a.find("Variance") != std::string::npos;
    }
    // ScaledScoreVarianceNearOne ignores --cases (4000 problems, 40000
    // under thorough).
    if (impls > 1 || properties > 1 || (thorough && variance)) return;
    if (impls == 0) args.insert(args.end(), {"--impl", "loop_f64"});
    if (properties == 0) args.insert(args.end(), {"--property", "MatchesOracle"});
    args.insert(args.end(), {"--cases", "1", "--no-isolation", "--no-real-sizes", "--save-failures",
                             "failures"});
  }
  clear_scratch_directory();
  write_file("problem.json", kProblem);
  write_file("fixture.json", kFixture);
  write_file("report.json", kReport);
  write_file("bad.json", "{\"format\": ");
  write_file("empty.json", "");
  write_file("dir/x.json", kProblem);
  run_cli(args);
}

}  // namespace
}  // namespace attncheck::fuzz

ATTNCHECK_FUZZ_TARGET("cli_args", attncheck::fuzz::enter_scratch_directory,
                      attncheck::fuzz::run);
