// The reporters of attncheck/reporters.h: the text of `attncheck check`
// against approved text for a fixed list of outcomes, the --report JSON
// written through report_json, and the --junit XML against the elements
// and attributes the JUnit schema requires.

#include "attncheck/reporters.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attncheck/dtype.h"
#include "formats/json.h"
#include "formats/report.h"
#include "attncheck/registry.h"

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
  // A shard's report says which it is (r.shard is 2/3), for merge-reports.
  nlohmann::json expected = report_json(r.outcomes, 42, "thorough");
  expected["shard"] = {{"index", 2}, {"count", 3}};
  EXPECT_EQ(read_json_file(path), expected);
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

TEST_F(JsonReporterTest, ReportsTheDeclarationsOfTheImplementationsWithOutcomes) {
  const std::string path = (dir_ / "report.json").string();
  const SessionResult r = result_of(fixed_outcomes());
  ImplInfo loop, absent;
  loop.name = "loop_f64";
  loop.dtypes = dtype_bit(DType::f64);
  absent.name = "not_in_this_shard";
  JsonReporter json(path, "--report", {loop, absent});
  json.on_start(r.seed, r.profile, r.shard);
  for (const PropertyOutcome& o : r.outcomes) json.on_outcome(o);
  json.on_finish(r);
  nlohmann::json expected = report_json(r.outcomes, 42, "thorough", {loop});
  expected["shard"] = {{"index", 2}, {"count", 3}};
  EXPECT_EQ(read_json_file(path), expected);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count_of(const std::string& text, const std::regex& re) {
  return static_cast<size_t>(std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                                           std::sregex_iterator()));
}

TEST_F(JsonReporterTest, JunitHasTheSchemasRequiredElementsAndAttributes) {
  const std::string path = (dir_ / "junit.xml").string();
  const SessionResult r = result_of(fixed_outcomes());
  JunitReporter junit(path, "--junit");
  junit.on_start(r.seed, r.profile, r.shard);
  for (const PropertyOutcome& o : r.outcomes) junit.on_outcome(o);
  junit.on_finish(r);
  const std::string xml = read_text(path);
  EXPECT_TRUE(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "));
  EXPECT_TRUE(xml.ends_with("</testsuites>\n"));
  // 8 outcomes: failed and xpass fail; xfail, skipped, unsupported and
  // not-run are skipped.
  EXPECT_NE(xml.find("<testsuites name=\"attncheck\" tests=\"8\" failures=\"2\" errors=\"0\" "
                     "skipped=\"4\" time=\""),
            std::string::npos)
      << xml;
  const std::regex suite(R"re(<testsuite name="[^"]+" tests="\d+" failures="\d+" errors="\d+" skipped="\d+" time="[0-9.]+">)re");
  EXPECT_EQ(count_of(xml, suite), 3u);  // loop_f64, batched_f32, broken_unscaled
  EXPECT_EQ(count_of(xml, std::regex("</testsuite>")), 3u);
  const std::regex testcase(R"re(<testcase classname="attncheck\.[a-z0-9_]+\.(f64|f32|bf16|f16)" name="[A-Za-z]+" time="[0-9.]+")re");
  EXPECT_EQ(count_of(xml, testcase), 8u);
  EXPECT_EQ(count_of(xml, std::regex(R"re(<failure message="FAILED [^"]*" type="failed">)re")), 1u);
  EXPECT_EQ(count_of(xml, std::regex(R"re(<failure message="passed, but [^"]*" type="xpass">)re")), 1u);
  EXPECT_EQ(count_of(xml, std::regex(R"re(<skipped message="(xfail|skipped|unsupported|not-run): [^"]*"/>)re")), 4u);
  EXPECT_NE(xml.find("classname=\"attncheck.broken_unscaled.f64\" name=\"ScaledScoreVarianceNearOne\""),
            std::string::npos);
  // The failure's whole report is the element's text.
  EXPECT_NE(xml.find("variance 12.5, expected 1\n</failure>"), std::string::npos) << xml;
}

TEST(JunitXml, EscapesEveryTextAndKeepsOnlyWhatXmlCanHold) {
  EXPECT_EQ(xml_escape("a<b>&\"c'", false), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("line\nnext\ttab", false), "line\nnext\ttab");
  EXPECT_EQ(xml_escape("line\nnext\ttab\r", true), "line&#10;next&#9;tab&#13;");
  // Control characters XML 1.0 forbids, and bytes that are not UTF-8.
  EXPECT_EQ(xml_escape(std::string("esc\x1b[31m nul") + '\0', false), "esc\\x1B[31m nul\\x00");
  EXPECT_EQ(xml_escape("bad \xff\xc3 end", false), "bad \\xFF\\xC3 end");
  EXPECT_EQ(xml_escape("\xed\xa0\x80", false), "\\xED\\xA0\\x80");  // a surrogate
  EXPECT_EQ(xml_escape("\xef\xbf\xbe", false), "\\xEF\\xBF\\xBE");  // U+FFFE
  EXPECT_EQ(xml_escape("caf\xc3\xa9 \xe2\x9c\x93", false), "caf\xc3\xa9 \xe2\x9c\x93");  // kept
}

TEST_F(JsonReporterTest, JunitEscapesForeignTextInEveryPlace) {
  const std::string path = (dir_ / "junit.xml").string();
  std::vector<PropertyOutcome> outcomes = {
      outcome("evil<\"&>", DType::f64, "MatchesOracle", PropertyStatus::failed,
              "FAILED \x1b[2J <script> & \"quotes\"\nsecond line \x01\n")};
  const SessionResult r = result_of(outcomes);
  JunitReporter junit(path, "--junit");
  junit.on_start(r.seed, r.profile, r.shard);
  for (const PropertyOutcome& o : r.outcomes) junit.on_outcome(o);
  junit.on_finish(r);
  const std::string xml = read_text(path);
  EXPECT_EQ(xml.find('\x1b'), std::string::npos);
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
  EXPECT_EQ(xml.find("<script>"), std::string::npos);
  EXPECT_NE(xml.find("<testsuite name=\"evil&lt;&quot;&amp;&gt;\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure message=\"FAILED \\x1B[2J &lt;script&gt; &amp; &quot;quotes&quot;\""),
            std::string::npos)
      << xml;
}

TEST_F(JsonReporterTest, AJunitFileThatCannotBeWrittenFailsAtOnce) {
  const std::string path = (dir_ / "missing" / "r.xml").string();
  try {
    JunitReporter junit(path, "--junit");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("--junit: cannot write '" + path + "'"))
        << e.what();
  }
}

}  // namespace
}  // namespace attncheck
