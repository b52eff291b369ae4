// The session of attncheck/session.h: seed resolution and its 2^53 bound,
// shards that partition the work list, expected failures, interruption,
// and what reporters are told.

#include "attncheck/session.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"
#include "attncheck/reporters.h"
#include "core/cancel.h"
#include "attncheck/fixture.h"
#include "run/failure_report.h"
#include "run/saved_failures.h"

namespace attncheck {
namespace {

// Sets ATTNCHECK_SEED (or unsets it, for nullptr) for one scope.
class SeedEnv {
 public:
  explicit SeedEnv(const char* value) {
    if (const char* old = std::getenv("ATTNCHECK_SEED")) old_ = old;
    if (value) {
      setenv("ATTNCHECK_SEED", value, 1);
    } else {
      unsetenv("ATTNCHECK_SEED");
    }
  }
  ~SeedEnv() {
    if (old_) {
      setenv("ATTNCHECK_SEED", old_->c_str(), 1);
    } else {
      unsetenv("ATTNCHECK_SEED");
    }
  }

 private:
  std::optional<std::string> old_;
};

// The message of the InputError `f` throws, or "" when it throws none.
template <typename F>
std::string input_error(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Seed, GivenBeatsTheEnvironmentWhichBeatsTheFixedSeed) {
  {
    const SeedEnv env(nullptr);
    EXPECT_EQ(resolve_seed(std::nullopt), kDefaultSeed);
    EXPECT_EQ(resolve_seed(std::string("42")), 42u);
  }
  {
    const SeedEnv env("7");
    EXPECT_EQ(resolve_seed(std::nullopt), 7u);
    EXPECT_EQ(resolve_seed(std::string("42")), 42u);
  }
  {
    const SeedEnv env("");  // set but empty: as if unset
    EXPECT_EQ(resolve_seed(std::nullopt), kDefaultSeed);
  }
}

TEST(Seed, OnlyIntegersBelowTwoToThe53AreSeeds) {
  const SeedEnv env(nullptr);
  EXPECT_EQ(resolve_seed(std::string("0")), 0u);
  EXPECT_EQ(resolve_seed(std::string("9007199254740991")), (1ull << 53) - 1);
  EXPECT_EQ(input_error([] { resolve_seed(std::string("9007199254740992")); }),
            "--seed: '9007199254740992' is not a seed (an integer below 2^53)");
  for (const char* bad : {"-5", "", "12x", "abc", "18446744073709551616"}) {
    EXPECT_NE(input_error([&] { resolve_seed(std::string(bad)); }).find("--seed: '"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(input_error([] { resolve_seed(std::string("-1"), "GTestSuiteOptions::seed"); }),
            "GTestSuiteOptions::seed: '-1' is not a seed (an integer below 2^53)");
}

TEST(Seed, TheEnvironmentIsCheckedAndNamed) {
  for (const char* bad : {"abc", "9007199254740992", "-3"}) {
    const SeedEnv env(bad);
    EXPECT_EQ(input_error([] { resolve_seed(std::nullopt); }),
              std::string("ATTNCHECK_SEED: '") + bad + "' is not a seed (an integer below 2^53)");
  }
}

TEST(Shard, ParsesKOverNWithKFromOne) {
  EXPECT_EQ(parse_shard("").index, 1);
  EXPECT_EQ(parse_shard("").count, 1);
  EXPECT_EQ(parse_shard("2/3").index, 2);
  EXPECT_EQ(parse_shard("2/3").count, 3);
  EXPECT_EQ(parse_shard("3/3").index, 3);
  EXPECT_EQ(parse_shard("10/10").index, 10);
  // One spelling: plain digits, no sign, space or leading zero (issue 50:
  // " 1/2", "01/02" and "+1/2" were read as 1/2, "1/2 " refused).
  for (const char* bad : {"0/3", "4/3", "3", "/3", "1/", "a/b", "1/3x", "-1/3", "1/0", " 1/2",
                          "01/02", "+1/2", "1/2 ", "1/ 2", "1/+2", "1//2", "1/2/3",
                          "1/9999999999"}) {
    EXPECT_EQ(input_error([&] { parse_shard(bad); }),
              std::string("--shard: '") + bad +
                  "' is not K/N (decimal digits, 1 <= K <= N, no sign, space or leading zero)");
  }
}

using ItemKey = std::tuple<std::string, DType, std::string>;

std::vector<ItemKey> keys(const std::vector<WorkItem>& items) {
  std::vector<ItemKey> out;
  for (const WorkItem& w : items) out.emplace_back(w.impl->info().name, w.dtype, w.property->name);
  return out;
}

TEST(WorkList, DefaultsToEveryReferenceAdapterAndLayerImplementation) {
  const auto impls = default_impls();
  ASSERT_FALSE(impls.empty());
  size_t expected = 0;
  for (const auto& impl : impls) {
    const Kind k = impl->info().kind;
    EXPECT_TRUE(k == Kind::reference || k == Kind::adapter || k == Kind::layer)
        << impl->info().name;
    expected += session_dtypes(impl->info(), std::nullopt).size() * property_catalog().size();
  }
  for (const auto& impl : registered_impls()) {
    if (impl->info().kind != Kind::broken) continue;
    for (const auto& d : impls) EXPECT_NE(d->info().name, impl->info().name);
  }
  EXPECT_EQ(work_list(SessionConfig{}).size(), expected);
}

TEST(WorkList, OrderIsImplementationsThenDtypesThenProperties) {
  SessionConfig config;
  config.impls = {find_impl("batched_f32"), find_impl("loop_f64")};
  config.properties = {find_property("RowSumsToOne"), find_property("MatchesOracle")};
  const std::vector<ItemKey> expected = {
      {"batched_f32", DType::f32, "RowSumsToOne"},  {"batched_f32", DType::f32, "MatchesOracle"},
      {"loop_f64", DType::f64, "RowSumsToOne"},     {"loop_f64", DType::f64, "MatchesOracle"},
  };
  ASSERT_EQ(session_dtypes(find_impl("batched_f32")->info(), std::nullopt),
            std::vector<DType>{DType::f32});
  EXPECT_EQ(keys(work_list(config)), expected);
}

TEST(WorkList, ADtypeFilterKeepsDtypesTheImplementationLacks) {
  // They are run, and reported skipped, so a user sees why nothing ran.
  SessionConfig config;
  config.impls = {find_impl("loop_f64")};
  config.properties = {find_property("RowSumsToOne")};
  config.dtype = DType::f16;
  EXPECT_EQ(keys(work_list(config)),
            (std::vector<ItemKey>{{"loop_f64", DType::f16, "RowSumsToOne"}}));
  config.run.seed = kDefaultSeed;
  const SessionResult r = run_session(config, {});
  ASSERT_EQ(r.outcomes.size(), 1u);
  EXPECT_EQ(r.outcomes[0].status, PropertyStatus::skipped);
}

TEST(WorkList, ShardsPartitionTheWholeList) {
  SessionConfig whole;
  const std::vector<ItemKey> all = keys(work_list(whole));
  for (int n : {1, 2, 3, 7}) {
    std::vector<ItemKey> joined(all.size());
    size_t seen = 0;
    for (int k = 1; k <= n; ++k) {
      SessionConfig config;
      config.shard = {k, n};
      const auto part = keys(work_list(config));
      // Shard k holds items k-1, k-1+n, k-1+2n, ... of the whole list.
      for (size_t j = 0; j < part.size(); ++j) {
        const size_t at = static_cast<size_t>(k - 1) + j * static_cast<size_t>(n);
        ASSERT_LT(at, all.size());
        joined[at] = part[j];
      }
      seen += part.size();
    }
    EXPECT_EQ(seen, all.size()) << n << " shards";
    EXPECT_EQ(joined, all) << n << " shards";
  }
}

PropertyOutcome outcome(const std::string& impl, const std::string& property,
                        PropertyStatus status, const std::string& message) {
  PropertyOutcome o;
  o.impl = impl;
  o.property = property;
  o.status = status;
  o.message = message;
  return o;
}

TEST(ExpectedFailuresInSession, FailedBecomesXfailAndPassedBecomesXpass) {
  ExpectedFailures expected;
  expected.path = "fixtures/expected-failures.json";
  expected.entries = {{"a", "P"}};

  PropertyOutcome failed = outcome("a", "P", PropertyStatus::failed, "FAILED P on a");
  apply_expected_failures(expected, failed);
  EXPECT_EQ(failed.status, PropertyStatus::xfail);
  EXPECT_EQ(failed.message, "FAILED P on a");

  PropertyOutcome passed = outcome("a", "P", PropertyStatus::passed, "3 cases");
  apply_expected_failures(expected, passed);
  EXPECT_EQ(passed.status, PropertyStatus::xpass);
  EXPECT_EQ(passed.message,
            "passed, but fixtures/expected-failures.json expects a failure: 3 cases");

  for (PropertyStatus s : {PropertyStatus::skipped, PropertyStatus::unsupported,
                           PropertyStatus::not_run}) {
    PropertyOutcome o = outcome("a", "P", s, "why");
    apply_expected_failures(expected, o);
    EXPECT_EQ(o.status, s);
  }
  PropertyOutcome other = outcome("a", "Q", PropertyStatus::failed, "FAILED Q on a");
  apply_expected_failures(expected, other);
  EXPECT_EQ(other.status, PropertyStatus::failed);
}

// Records what a reporter is told; sets `cancel` after `cancel_after`
// outcomes (as a Ctrl-C would between properties).
class RecordingReporter : public Reporter {
 public:
  void on_start(uint64_t seed, Profile profile, const Shard& shard) override {
    events.push_back("start " + std::to_string(seed) + " " + std::string(profile_name(profile)) +
                     " " + std::to_string(shard.index) + "/" + std::to_string(shard.count));
  }
  void on_outcome(const PropertyOutcome& o) override {
    events.push_back("outcome " + std::string(status_name(o.status)) + " " + o.property);
    if (cancel && ++outcomes == cancel_after) *cancel = true;
  }
  void on_finish(const SessionResult& r) override {
    events.push_back("finish " + std::to_string(r.outcomes.size()) +
                     (r.interrupted ? " interrupted" : ""));
  }

  std::vector<std::string> events;
  std::atomic<bool>* cancel = nullptr;
  int cancel_after = 0;
  int outcomes = 0;
};

SessionConfig two_cheap_properties() {
  SessionConfig config;
  config.impls = {find_impl("loop_f64")};
  config.properties = {find_property("RowSumsToOne"), find_property("MatchesOracle")};
  config.run.seed = 5;
  config.run.cases = 2;
  return config;
}

TEST(Session, ReportersAreToldOfEachOutcomeInOrder) {
  SessionConfig config = two_cheap_properties();
  config.run.profile = Profile::thorough;
  // The claim is the reporters' events; the thorough real-size phase (46 s
  // of MatchesOracle on loop_f64) adds nothing to it.
  config.run.real_sizes = false;
  config.expected_failures.path = "x.json";
  config.expected_failures.entries = {{"loop_f64", "MatchesOracle"}};
  RecordingReporter rec;
  const SessionResult r = run_session(config, {&rec});
  EXPECT_EQ(rec.events, (std::vector<std::string>{"start 5 thorough 1/1",
                                                  "outcome passed RowSumsToOne",
                                                  "outcome xpass MatchesOracle", "finish 2"}));
  EXPECT_EQ(r.seed, 5u);
  EXPECT_EQ(r.profile, Profile::thorough);
  EXPECT_EQ(r.count(PropertyStatus::passed), 1);
  EXPECT_EQ(r.count(PropertyStatus::xpass), 1);
  EXPECT_EQ(r.count(PropertyStatus::failed), 0);
  EXPECT_TRUE(r.failed());  // an xpass fails the run
  EXPECT_FALSE(r.interrupted);
  // Only passing outcomes count towards the largest budget used.
  ASSERT_EQ(r.max_budget.size(), 1u);
  EXPECT_EQ(r.max_budget.at("loop_f64"), r.outcomes[0].max_budget_used);
}

TEST(Session, InterruptedItemsAreNotRun) {
  std::atomic<bool> cancel{true};
  SessionConfig config = two_cheap_properties();
  config.cancel = &cancel;
  const SessionResult r = run_session(config, {});
  ASSERT_EQ(r.outcomes.size(), 2u);
  for (const PropertyOutcome& o : r.outcomes) {
    EXPECT_EQ(o.status, PropertyStatus::not_run);
    EXPECT_EQ(o.message, "interrupted");
    EXPECT_EQ(o.impl, "loop_f64");
    EXPECT_EQ(o.dtype, DType::f64);
  }
  EXPECT_EQ(r.outcomes[1].property, "MatchesOracle");
  EXPECT_EQ(r.count(PropertyStatus::not_run), 2);
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(r.failed());
}

TEST(Session, AnInterruptionBetweenPropertiesStopsTheRest) {
  std::atomic<bool> cancel{false};
  SessionConfig config = two_cheap_properties();
  config.cancel = &cancel;
  RecordingReporter rec;
  rec.cancel = &cancel;
  rec.cancel_after = 1;
  const SessionResult r = run_session(config, {&rec});
  EXPECT_EQ(rec.events, (std::vector<std::string>{"start 5 ci 1/1", "outcome passed RowSumsToOne",
                                                  "outcome not-run MatchesOracle",
                                                  "finish 2 interrupted"}));
  EXPECT_TRUE(r.interrupted);
}

// loop_f64 whose run is interrupted (SIGINT / SIGTERM: request_cancel) at
// its third call; later calls throw Cancelled, as an isolated call does.
class InterruptedAtThirdCall final : public Implementation {
 public:
  const ImplInfo& info() const override { return base_->info(); }
  ForwardResult forward(const Problem& p) const override {
    if (++calls == 3) request_cancel();
    if (cancel_requested()) throw Cancelled();
    return base_->forward(p);
  }
  mutable int calls = 0;

 private:
  std::shared_ptr<const Implementation> base_ = find_impl("loop_f64");
};

TEST(Session, AnInterruptionMidPropertySavesNoFixture) {
  // RapidCheck took the Cancelled calls for a failure and shrank it to a
  // 1 x 1 problem; --save-failures kept that fixture, which replays as a
  // pass (found in a thorough run stopped with SIGTERM).
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("attncheck-interrupt-{}", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SessionConfig config = two_cheap_properties();
  config.impls = {std::make_shared<InterruptedAtThirdCall>()};
  config.run.cases = 20;
  config.run.save_failures_dir = dir.string();
  const SessionResult r = run_session(config, {});
  reset_cancel();
  ASSERT_EQ(r.outcomes.size(), 2u);
  for (const PropertyOutcome& o : r.outcomes) {
    EXPECT_EQ(o.status, PropertyStatus::not_run) << o.property << ": " << o.message;
    EXPECT_FALSE(o.fixture) << *o.fixture;
  }
  EXPECT_TRUE(r.interrupted);
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << dir;
  std::filesystem::remove_all(dir);
}

TEST(Session, AFixtureAnotherRunWroteDuringThisOneIsKeptAndThisRunsGoesBeside) {
  // Two runs sharing a --save-failures folder (pytest -n, ctest -j, two CI
  // jobs) once left a report naming a fixture that held the other run's
  // case: the later save replaced the earlier one (issue 50).
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("attncheck-shared-{}", getpid());
  fs::remove_all(dir);
  RunConfig run;
  run.save_failures_dir = dir.string();
  const PropertyInfo& prop = *find_property("MatchesOracle");
  const std::string path = fixture_path(dir.string(), "broken_unscaled", DType::f64, prop.name);
  const auto text = [](const std::string& file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  Fixture theirs = load_fixture(ATTNCHECK_SOURCE_DIR "/fixtures/seed_exercise1.json");
  theirs.meta.property = prop.name;
  Fixture mine = theirs;
  mine.meta.seed = 12345;
  // This run reads the folder first (no fixture yet); another run then
  // saves its case there, by its own hand (this process does not see it).
  ASSERT_FALSE(find_saved_failure(prop, "broken_unscaled", DType::f64, run));
  save_fixture(path, theirs);
  const std::string their_text = text(path);
  const std::string saved = save_failure_fixture(dir.string(), path, mine);
  EXPECT_EQ(fs::path(saved).filename(), "broken_unscaled-f64-MatchesOracle-2.json");
  EXPECT_EQ(text(path), their_text) << "the other run's fixture was replaced";
  EXPECT_NE(text(saved).find("12345"), std::string::npos);
  // A fixture this run read is replaced in place.
  find_saved_failure(prop, "broken_unscaled", DType::f64, run);
  EXPECT_EQ(save_failure_fixture(dir.string(), path, mine), path);
  EXPECT_NE(text(path).find("12345"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Session, AnExpectedFailureIsXfail) {
  SessionConfig config;
  config.impls = {find_impl("broken_unscaled")};
  config.properties = {find_property("MatchesOracle")};
  config.dtype = DType::f64;
  config.run.seed = kDefaultSeed;
  config.run.cases = 20;
  config.expected_failures.entries = {{"broken_unscaled", "MatchesOracle"}};
  const SessionResult r = run_session(config, {});
  ASSERT_EQ(r.outcomes.size(), 1u);
  EXPECT_EQ(r.outcomes[0].status, PropertyStatus::xfail);
  EXPECT_FALSE(r.failed());
  EXPECT_TRUE(r.max_budget.empty());
}

}  // namespace
}  // namespace attncheck
