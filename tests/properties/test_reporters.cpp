// The reporters of attncheck/reporters.h: the text of `attncheck check`
// against approved text for a fixed list of outcomes, and the --report
// JSON written through report_json.

#include "attncheck/reporters.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attncheck/error.h"
#include "attncheck/fixture.h"
#include "attncheck/report.h"
#include "attncheck/version.h"

namespace attncheck {
namespace {

namespace fs = std::filesystem;

PropertyOutcome outcome(std::string impl, DType dtype, std::string property,
                        PropertyStatus status, std::string message, double budget = 0) {
  PropertyOutcome o;
  o.impl = std::move(impl);
  o.dtype = dtype;
  o.property = std::move(property);
  o.status = status;
  o.message = std::move(message);
  o.max_budget_used = budget;
  return o;
}

// One outcome of every status, and the session's result over them.
std::vector<PropertyOutcome> fixed_outcomes() {
  return {
      outcome("loop_f64", DType::f64, "MatchesOracle", PropertyStatus::passed,
              "100 cases, max budget used 0.25", 0.25),
      outcome("batched_f32", DType::f32, "RowSumsToOne", PropertyStatus::passed,
              "100 cases, max budget used 0.0123", 0.0123),
      outcome("broken_unscaled", DType::f64, "ScaledScoreVarianceNearOne",
              PropertyStatus::failed,
              "FAILED ScaledScoreVarianceNearOne on broken_unscaled (f64)\n"
              "  variance 12.5, expected 1\n"),
      outcome("broken_unscaled", DType::f32, "MatchesOracle", PropertyStatus::xfail,
              "FAILED MatchesOracle on broken_unscaled (f32)\n  out[0,0,0,0] differs\n"),
      outcome("loop_f64", DType::f32, "RowSumsToOne", PropertyStatus::skipped,
              "dtype f32 is not supported"),
      outcome("loop_f64", DType::f64, "CausalPrefix", PropertyStatus::unsupported,
              "gave up after 3 cases: 20 discarded (20 unsupported by the implementation)"),
      outcome("loop_f64", DType::f64, "Determinism", PropertyStatus::xpass,
              "passed, but fixtures/expected-failures.json expects a failure: 5 cases"),
      outcome("loop_f64", DType::f64, "Gradients", PropertyStatus::not_run, "interrupted"),
  };
}

SessionResult result_of(const std::vector<PropertyOutcome>& outcomes) {
  SessionResult r;
  r.seed = 42;
  r.profile = Profile::thorough;
  r.shard = {2, 3};
  r.outcomes = outcomes;
  for (const PropertyOutcome& o : outcomes) {
    ++r.counts[o.status];
    if (o.status == PropertyStatus::passed) r.max_budget[o.impl] = o.max_budget_used;
  }
  return r;
}

std::string text_of(const SessionResult& r) {
  std::ostringstream out;
  TextReporter text(out);
  text.on_start(r.seed, r.profile, r.shard);
  for (const PropertyOutcome& o : r.outcomes) text.on_outcome(o);
  text.on_finish(r);
  return out.str();
}

TEST(TextReporter, PrintsWhatAttncheckCheckPrints) {
  // Approved text: the lines of `attncheck check` (columns of 11, 24, 4
  // and 28; a failure's report below its line; budgets by name).
  const std::string approved = fmt::format(
      "attncheck {}: seed 42, profile thorough, shard 2/3\n"
      "passed      loop_f64                 f64  MatchesOracle                100 cases, max "
      "budget used 0.25\n"
      "passed      batched_f32              f32  RowSumsToOne                 100 cases, max "
      "budget used 0.0123\n"
      "failed      broken_unscaled          f64  ScaledScoreVarianceNearOne   \n"
      "FAILED ScaledScoreVarianceNearOne on broken_unscaled (f64)\n"
      "  variance 12.5, expected 1\n"
      "\n"
      "xfail       broken_unscaled          f32  MatchesOracle                \n"
      "FAILED MatchesOracle on broken_unscaled (f32)\n"
      "  out[0,0,0,0] differs\n"
      "\n"
      "skipped     loop_f64                 f32  RowSumsToOne                 dtype f32 is not "
      "supported\n"
      "unsupported loop_f64                 f64  CausalPrefix                 gave up after 3 "
      "cases: 20 discarded (20 unsupported by the implementation)\n"
      "xpass       loop_f64                 f64  Determinism                  passed, but "
      "fixtures/expected-failures.json expects a failure: 5 cases\n"
      "not-run     loop_f64                 f64  Gradients                    interrupted\n"
      "largest budget used by a passing case: batched_f32              0.0123\n"
      "largest budget used by a passing case: loop_f64                 0.25\n"
      "2 passed, 1 failed, 1 skipped, 1 unsupported, 1 xfail, 1 xpass, 1 not-run\n",
      version());
  EXPECT_EQ(text_of(result_of(fixed_outcomes())), approved);
}

TEST(TextReporter, NamesNoShardForAWholeRun) {
  SessionResult r = result_of({});
  r.shard = {1, 1};
  r.profile = Profile::ci;
  EXPECT_EQ(text_of(r), fmt::format("attncheck {}: seed 42, profile ci\n"
                                    "0 passed, 0 failed, 0 skipped, 0 unsupported, 0 xfail, "
                                    "0 xpass, 0 not-run\n",
                                    version()));
}

class JsonReporterTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attncheck-test-reporters-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(JsonReporterTest, WritesTheOutcomesThroughReportJson) {
  const std::string path = (dir_ / "report.json").string();
  const SessionResult r = result_of(fixed_outcomes());
  JsonReporter json(path, "--report");
  EXPECT_FALSE(fs::exists(path + ".tmp"));  // the writability probe is removed
  json.on_start(r.seed, r.profile, r.shard);
  for (const PropertyOutcome& o : r.outcomes) json.on_outcome(o);
  json.on_finish(r);
  EXPECT_EQ(read_json_file(path), report_json(r.outcomes, 42, "thorough"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(JsonReporterTest, AReportThatCannotBeWrittenFailsAtOnce) {
  const std::string path = (dir_ / "missing" / "r.json").string();
  try {
    JsonReporter json(path, "--report");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--report: cannot write '" + path + "': no directory '" +
                                         (dir_ / "missing").string() + "'");
  }
}

}  // namespace
}  // namespace attncheck
