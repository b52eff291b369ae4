// The --report JSON (SPEC 5.2): its writer, merge-reports' reader beside
// it, and the atomic write both use.

#include "formats/report.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attncheck/dtype.h"
#include "formats/json.h"
#include "formats/output_file.h"

namespace attncheck {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

PropertyOutcome outcome(const std::string& property, PropertyStatus status) {
  PropertyOutcome o;
  o.impl = "loop_f64";
  o.property = property;
  o.status = status;
  o.cases = 3;
  o.max_budget_used = 0.5;
  o.message = "3 cases";
  return o;
}

class ReportTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attncheck-test-report-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `j` (or raw text) to dir_/name and returns the path.
  std::string write(const std::string& name, const json& j) { return write_text(name, j.dump()); }
  std::string write_text(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // The InputError message of merging `paths`, or "" when it merges.
  static std::string merge_error(const std::vector<std::string>& paths) {
    try {
      merge_reports(paths);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(ReportTest, ReportJsonHoldsTheRunAndEveryResult) {
  PropertyOutcome failed = outcome("RowSumsToOne", PropertyStatus::failed);
  failed.counterexample = CounterexampleShape{1, 2, 1, 3, 4, 5, 6, DType::f32};
  failed.fixture = "fails/x.json";
  failed.diagnosis = {"unscaled"};
  const json r =
      report_json({outcome("MatchesOracle", PropertyStatus::passed), failed}, 42, "thorough");
  EXPECT_EQ(r["format"], "attncheck-report-1");
  EXPECT_EQ(r["attncheck"], version());
  EXPECT_EQ(r["seed"], 42);
  EXPECT_EQ(r["profile"], "thorough");
  ASSERT_EQ(r["results"].size(), 2u);
  const json& p = r["results"][0];
  EXPECT_EQ(p["status"], "passed");
  EXPECT_EQ(p["kind"], "reference");
  EXPECT_EQ(p["dtype"], "f64");
  EXPECT_EQ(p["cases"], 3);
  EXPECT_EQ(p["max_budget_used"], 0.5);
  EXPECT_TRUE(p["fixture"].is_null());
  EXPECT_TRUE(p["counterexample"].is_null());
  const json& f = r["results"][1];
  EXPECT_EQ(f["status"], "failed");
  EXPECT_EQ(f["fixture"], "fails/x.json");
  EXPECT_EQ(f["diagnosis"], json::array({"unscaled"}));
  EXPECT_EQ(f["counterexample"]["tq"], 3);
  EXPECT_EQ(f["counterexample"]["dtype"], "f32");
}

TEST_F(ReportTest, RealSizeCountsArePerResultAndNullWithoutThePhase) {
  // Issue 31, item 2: every result says what its real-size shapes came
  // to; null where the phase did not run (small problems only).
  PropertyOutcome sized = outcome("MatchesOracle", PropertyStatus::passed);
  sized.real_sizes = RealSizeCounts{16, 10, 4, 1, 1};
  const json r = report_json({sized, outcome("RowSumsToOne", PropertyStatus::passed)}, 1, "ci");
  const json& n = r["results"][0]["real_sizes"];
  EXPECT_EQ(n, json({{"shapes", 16}, {"judged", 10}, {"beyond_precision", 4}, {"discarded", 1},
                     {"unsupported", 1}}));
  ASSERT_TRUE(r["results"][1].contains("real_sizes"));
  EXPECT_TRUE(r["results"][1]["real_sizes"].is_null());
}

TEST(RealSizeSummary, SaysWhatEveryShapeCameTo) {
  EXPECT_EQ(real_size_summary({16, 10, 4, 1, 1}, false, "AsAccurateAsBaseline"),
            "16 shapes: 10 judged, 4 beyond the declared precision, 1 discarded, 1 unsupported");
  EXPECT_EQ(real_size_summary({13, 13, 0, 0, 0}, false, "AsAccurateAsBaseline"), "13 shapes: 13 judged");
  EXPECT_EQ(real_size_summary({5, 0, 0, 2, 3}, false, "AsAccurateAsBaseline"),
            "all 5 shapes discarded (2 discarded, 3 unsupported)");
  EXPECT_EQ(real_size_summary({5, 0, 5, 0, 0}, false, "AsAccurateAsBaseline"),
            "all 5 shapes discarded (5 beyond the declared precision; those beyond the "
            "precision judged by AsAccurateAsBaseline)");
  // AsAccurateAsBaseline judges the shapes beyond the precision.
  EXPECT_EQ(real_size_summary({16, 15, 9, 0, 1}, true, "AsAccurateAsBaseline"),
            "16 shapes: 15 judged (9 beyond the declared precision), 1 unsupported");
}

TEST_F(ReportTest, DTypeIsSpelledAsTheCombination) {
  PropertyOutcome mixed = outcome("RowSumsToOne", PropertyStatus::skipped);
  mixed.dtype = DType::bf16;
  mixed.combo = DTypeCombo{DType::bf16, DType::e4m3, DType::bf16};
  PropertyOutcome uniform = outcome("RowSumsToOne", PropertyStatus::passed);
  uniform.dtype = DType::f16;
  const json r = report_json({mixed, uniform}, 1, "ci");
  EXPECT_EQ(r["results"][0]["dtype"], "q=bf16,kv=e4m3,out=bf16");
  EXPECT_EQ(r["results"][1]["dtype"], "f16");
}

// The implementation outcome() names, as a report declares it.
ImplInfo loop_info() {
  ImplInfo info;
  info.name = "loop_f64";
  return info;
}

TEST_F(ReportTest, MergeJoinsTheResultsInOrder) {
  const std::string a =
      write("a.json", report_json({outcome("A", PropertyStatus::passed)}, 7, "ci", {loop_info()}));
  const std::string b = write("b.json", report_json({outcome("B", PropertyStatus::failed),
                                                     outcome("C", PropertyStatus::xpass)},
                                                    7, "ci", {loop_info()}));
  const json merged = merge_reports({a, b});
  EXPECT_EQ(merged["format"], "attncheck-report-1");
  EXPECT_EQ(merged["seed"], 7);
  EXPECT_EQ(merged["profile"], "ci");
  ASSERT_EQ(merged["results"].size(), 3u);
  EXPECT_EQ(merged["results"][0]["property"], "A");
  EXPECT_EQ(merged["results"][2]["property"], "C");
  EXPECT_EQ(failing_results(merged), 2);  // failed and xpass
  EXPECT_EQ(merge_reports({a}), read_json_file(a));
  EXPECT_EQ(failing_results(merge_reports({a})), 0);
}

TEST_F(ReportTest, ImplementationsCarryEveryDeclaredField) {
  ImplInfo info;
  info.name = "plugged";
  info.kind = Kind::plugin;
  info.origin = "/p/lib.so";
  info.dtypes = dtype_bit(DType::f32);
  info.features = ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_SINK | (1u << 30);
  info.empty_rows = EmptyRowPolicy::zero;
  info.precision.accum = DType::f32;
  info.precision.s_cast = DType::bf16;
  info.precision.ftz_formats = kFtzAccum | kFtzOut;
  info.limits.dk_max = 256;
  info.combos = {{DType::f16, DType::f16, DType::f32}};
  const json j = implementation_json(info);
  EXPECT_EQ(j["name"], "plugged");
  EXPECT_EQ(j["kind"], "plugin");
  EXPECT_EQ(j["origin"], "/p/lib.so");
  EXPECT_TRUE(j["caught_by"].is_null());
  EXPECT_EQ(j["dtypes"], json::array({"f32"}));
  EXPECT_EQ(j["combos"], json::parse(R"([{"q": "f16", "kv": "f16", "out": "f32"}])"));
  // A bit the table does not name is still shown.
  EXPECT_EQ(j["features"], json::array({"CAUSAL", "SINK", "bit 30"}));
  EXPECT_EQ(j["empty_rows"], "zero");
  EXPECT_EQ(j["precision"]["accum"], "f32");
  EXPECT_EQ(j["precision"]["s_cast"], "bf16");
  EXPECT_EQ(j["precision"]["ftz_formats"], json::array({"ACCUM", "OUT"}));
  EXPECT_EQ(j["limits"]["dk_max"], 256);
  const json report = report_json({}, 7, "ci", {info});
  EXPECT_EQ(report["implementations"], json::array({j}));
}

TEST_F(ReportTest, MergeJoinsImplementationsOnceByName) {
  ImplInfo a, b;
  a.name = "a";
  b.name = "b";
  const std::string one = write("one.json", report_json({}, 7, "ci", {a}));
  const std::string two = write("two.json", report_json({}, 7, "ci", {a, b}));
  json old = report_json({}, 7, "ci");
  old.erase("implementations");  // written before the field existed
  const std::string three = write("three.json", old);
  const json merged = merge_reports({three, one, two});
  ASSERT_EQ(merged["implementations"].size(), 2u);
  EXPECT_EQ(merged["implementations"][0]["name"], "a");
  EXPECT_EQ(merged["implementations"][1]["name"], "b");
  json bad = report_json({}, 7, "ci");
  bad["implementations"] = json::array({json{{"name", 3}}});
  const std::string broken = write("bad.json", bad);
  EXPECT_EQ(merge_error({one, broken}),
            broken + ": field 'implementations': expected an array of objects with a string 'name'");
}

TEST_F(ReportTest, MergeRefusesAnotherRunsReport) {
  const std::string a = write("a.json", report_json({}, 7, "ci"));
  const std::string seed = write("seed.json", report_json({}, 8, "ci"));
  const std::string profile = write("profile.json", report_json({}, 7, "thorough"));
  EXPECT_EQ(merge_error({a, seed}), seed + ": field 'seed' differs from the first report's");
  EXPECT_EQ(merge_error({a, profile}),
            profile + ": field 'profile' differs from the first report's");
}

TEST_F(ReportTest, MergeRefusesWhatIsNotAReportInOneLineNamingTheFile) {
  const std::string a = write("a.json", report_json({}, 7, "ci"));
  const std::string no_format = write("f.json", json{{"results", json::array()}});
  EXPECT_EQ(merge_error({a, no_format}),
            no_format + ": field 'format': not an attncheck-report-1 report");
  const std::string array = write("arr.json", json::array());
  EXPECT_EQ(merge_error({array}), array + ": field 'format': not an attncheck-report-1 report");
  const std::string no_results = write("r.json", json{{"format", "attncheck-report-1"}});
  EXPECT_EQ(merge_error({no_results}),
            no_results + ": field 'results': missing");
  const std::string bad_status = write(
      "s.json", json{{"format", "attncheck-report-1"}, {"results", json::array({json{{"status", 3}}})}});
  EXPECT_EQ(merge_error({bad_status}), bad_status + ": field 'attncheck': missing");
  const std::string not_json = write_text("n.json", "{\"format\": ");
  EXPECT_EQ(merge_error({not_json}).rfind(not_json + ": ", 0), 0u);
  EXPECT_EQ(merge_error({(dir_ / "missing.json").string()}).rfind((dir_ / "missing.json").string(), 0),
            0u);
}

TEST_F(ReportTest, MergeChecksEveryFieldOfEveryResult) {
  // Issue 50: a status merge-reports does not know (or none) was merged as
  // "0 failed", exit 0; every field is now checked, naming file and field.
  const json good = report_json({outcome("A", PropertyStatus::failed)}, 7, "ci", {loop_info()});
  EXPECT_EQ(merge_error({write("good.json", good)}), "");
  const auto error = [&](const std::string& name, auto change) {
    json j = good;
    change(j);
    return merge_error({write(name, j)});
  };
  const auto result_error = [&](const std::string& name, auto change) {
    return error(name, [&](json& j) { change(j["results"][0]); });
  };
  const std::string r0 = (dir_ / "r.json").string() + ": results[0]: field ";
  EXPECT_EQ(result_error("r.json", [](json& r) { r["status"] = "bogus"; }),
            r0 + "'status': unknown value \"bogus\" (expected one of passed, failed, xfail, xpass, "
                 "skipped, unsupported, not-run)");
  EXPECT_EQ(result_error("r.json", [](json& r) { r.erase("status"); }), r0 + "'status': missing");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["status"] = 1; }),
            r0 + "'status': expected a string, got 1");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["cases"] = -5; }), r0 + "'cases': must be >= 0, got -5");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["cases"] = 2.5; }),
            r0 + "'cases': expected an integer, got 2.5");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["colour"] = "red"; }), r0 + "'colour': unknown field");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["kind"] = "fancy"; }).rfind(r0 + "'kind': unknown value", 0), 0u);
  EXPECT_EQ(result_error("r.json", [](json& r) { r["dtype"] = "f8"; }).rfind(r0 + "'dtype': ", 0), 0u);
  EXPECT_EQ(result_error("r.json", [](json& r) { r["diagnosis"] = json::array({1}); }),
            r0 + "'diagnosis': element 0: expected a string, got 1");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["counterexample"] = {{"tq", 0}}; }),
            (dir_ / "r.json").string() + ": results[0]: field 'counterexample': field 'batch': missing");
  EXPECT_EQ(result_error("r.json", [](json& r) { r["impl"] = "other"; }),
            r0 + "'impl': 'other' is not one of the report's implementations");
  const std::string top = (dir_ / "t.json").string() + ": field ";
  for (const json& seed : {json("7"), json(-1), json(2.5), json(uint64_t{1} << 53)}) {
    EXPECT_EQ(error("t.json", [&](json& j) { j["seed"] = seed; }).rfind(top + "'seed': ", 0), 0u) << seed;
  }
  EXPECT_EQ(error("t.json", [](json& j) { j["profile"] = "fast"; }),
            top + "'profile': expected \"ci\" or \"thorough\", got \"fast\"");
  EXPECT_EQ(error("t.json", [](json& j) { j["extra"] = 1; }), top + "'extra': unknown field");
  EXPECT_EQ(error("t.json", [](json& j) { j["shard"] = {{"index", 3}, {"count", 2}}; }),
            top + "'shard': index is larger than count");
  // Two reports declaring one implementation otherwise: two builds.
  ImplInfo other = loop_info();
  other.description = "another build";
  const std::string a = write("a.json", good);
  json second = report_json({outcome("B", PropertyStatus::passed)}, 7, "ci", {other});
  const std::string b = write("b.json", second);
  EXPECT_EQ(merge_error({a, b}),
            b + ": field 'implementations': 'loop_f64' is declared otherwise than in " + a);
}

TEST_F(ReportTest, WritingReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = (dir_ / "out.json").string();
  write_output_file(path, "first\n", "--report");
  write_output_file(path, "second\n", "--report");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  const std::string bad = (dir_ / "missing" / "out.json").string();
  try {
    write_output_file(bad, "x", "merge-reports");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "merge-reports: cannot write '" + bad + "': no directory '" +
                                         (dir_ / "missing").string() + "'");
  }
}

}  // namespace
}  // namespace attncheck
