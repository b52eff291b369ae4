// Fuzz target "report": the report reader of `attncheck merge-reports`
// (merge_reports, formats/report.cpp), driven through the command line in-process.
//
// The input is written to in.json and merged after a valid report of the
// CI seed and profile (so that the seed / profile comparison and the
// joining of results run), and alone when its seed or profile differs. Contract: exit 0, 1 or 2;
// exit 2 is one line on stderr naming in.json, never an internal error;
// a merged report is itself accepted by merge-reports.

#include <string>
#include <string_view>

#include "fuzz_target.h"

namespace attncheck::fuzz {
namespace {

// A report as `attncheck check --report` writes it (SPEC 5.2).
constexpr std::string_view kBase = R"({
  "format": "attncheck-report-1", "attncheck": "0.1.0", "seed": 20260101, "profile": "ci",
  "results": [{"impl": "loop_f64", "kind": "reference", "dtype": "f64",
               "property": "MatchesOracle", "status": "passed", "cases": 100,
               "discarded": 0, "max_budget_used": 0.25, "message": "",
               "diagnosis": [], "fixture": null, "counterexample": null}]
})";

void check_merged(const CliResult& r, const std::string& what) {
  if (r.code == 2) {
    expect_one_line_naming(r.err.substr(0, r.err.size() - 1), "in.json", what);
    return;
  }
  // Accepted: the merged report is a report merge-reports accepts again.
  const CliResult again = run_cli({"merge-reports", "again.json", "out.json"});
  if (again.code == 2) fail(what + ": its merged report is refused: " + again.err);
  if (again.code != r.code) fail(what + ": merging the merged report changes the exit code");
}

void run(const uint8_t* data, size_t size) {
  clear_scratch_directory();
  write_file("base.json", kBase);
  write_file("in.json", std::string_view(reinterpret_cast<const char*>(data), size));
  // Alone when the input is of another seed or profile than the base
  // (each run_cli costs milliseconds: one merge per input where possible).
  const CliResult both = run_cli({"merge-reports", "out.json", "base.json", "in.json"});
  if (both.code == 2 && both.err.find("differs from the first report") != std::string::npos) {
    check_merged(run_cli({"merge-reports", "out.json", "in.json"}), "merge-reports in.json");
  } else {
    check_merged(both, "merge-reports base.json in.json");
  }
}

}  // namespace
}  // namespace attncheck::fuzz

ATTNCHECK_FUZZ_TARGET("report", attncheck::fuzz::enter_scratch_directory,
                      attncheck::fuzz::run);
