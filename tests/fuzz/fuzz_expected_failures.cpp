// Fuzz target "expected_failures": the reader of
// fixtures/expected-failures.json (formats/expected_failures.cpp), which
// `attncheck check` loads from the working directory, driven through the
// command line in-process.
//
// The input becomes fixtures/expected-failures.json of the scratch
// directory; one case of MatchesOracle runs on loop_f64 (a passing pair, so
// a list naming it turns it into an xpass). Contract: exit 0, 1 or 2; exit 2
// is one line on stderr naming the file, never an internal error; a list
// naming (loop_f64, MatchesOracle) gives exit 1.

#include <string>
#include <string_view>

#include "fuzz_target.h"

namespace attncheck::fuzz {
namespace {

constexpr const char* kPath = "fixtures/expected-failures.json";

void run(const uint8_t* data, size_t size) {
  clear_scratch_directory();
  write_file(kPath, std::string_view(reinterpret_cast<const char*>(data), size));
  const CliResult r = run_cli({"check", "--impl", "loop_f64", "--property", "MatchesOracle",
                               "--dtype", "f64", "--cases", "1", "--no-isolation",
                               "--save-failures", "failures"});
  if (r.code == 2) {
    expect_one_line_naming(r.err.substr(0, r.err.size() - 1), kPath, "check");
  }
}

}  // namespace
}  // namespace attncheck::fuzz

ATTNCHECK_FUZZ_TARGET("expected_failures", attncheck::fuzz::enter_scratch_directory,
                      attncheck::fuzz::run);
