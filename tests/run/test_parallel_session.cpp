// check --jobs (run/parallel_session.h): the outcome codec's round trip, the
// same outcomes in the same order for any number of processes, a process
// that dies costs its item only, and the default number of processes.

#include "run/parallel_session.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attncheck/registry.h"
#include "attncheck/session.h"
#include "run/outcome_codec.h"

namespace attncheck {
namespace {

TEST(OutcomeCodec, EveryFieldComesBackAsItWas) {
  PropertyOutcome o;
  o.property = "MatchesOracle";
  o.impl = "x";
  o.kind = Kind::plugin;
  o.dtype = DType::bf16;
  o.combo = DTypeCombo{DType::f32, DType::e4m3, DType::bf16};
  o.status = PropertyStatus::xfail;
  o.cases = 7;
  o.discarded = 3;
  o.max_budget_used = 0.1 + 0.2;  // not a short decimal: bits must survive
  o.real_sizes = RealSizeCounts{16, 10, 4, 1, 1};
  o.message = std::string("line\nwith \0 a nul", 17);
  o.fixture = "f.json";
  o.fixture_error = "cannot write";
  o.counterexample = CounterexampleShape{1, 2, 1, 3, 4, 5, 6, DType::f16};
  o.diagnosis = {"scale_one", "causal_strict"};
  o.expected = KnownFinding{"empty_row_nan", "F3", "NaN rows", "ggml/x.json"};
  o.also_explained = {"F1"};
  o.saved = SavedFailure{"d/x.json", SavedFailure::Result::now_passes, "d/fixed/x.json"};
  o.coverage = {{"a GQA group above 1", 3, 100}, {"causal top-left", 0, 40}};
  const PropertyOutcome back = decode_outcome(encode_outcome(o));
  EXPECT_EQ(encode_outcome(back), encode_outcome(o));
  EXPECT_EQ(back.message, o.message);
  EXPECT_EQ(back.max_budget_used, o.max_budget_used);
  EXPECT_EQ(back.expected, o.expected);
  EXPECT_EQ(back.combo, o.combo);
  EXPECT_EQ(back.real_sizes->beyond_precision, 4);
  EXPECT_EQ(back.counterexample->dv, 6);
  EXPECT_EQ(back.also_explained, o.also_explained);
  EXPECT_EQ(back.saved, o.saved);
  EXPECT_EQ(back.coverage, o.coverage);
  EXPECT_THROW(decode_outcome(encode_outcome(o).substr(0, 40)), std::runtime_error);
}

// Reference implementations and broken twins (failures, shrinking,
// fixtures, a diagnosis) on cheap properties.
SessionConfig mixed_session(const std::string& fixtures) {
  SessionConfig c;
  for (const char* name : {"loop_f64", "broken_unscaled", "batched_f32", "broken_mask_after_softmax"})
    c.impls.push_back(find_impl(name));
  for (const char* name : {"RowSumsToOne", "MatchesOracle", "MaskedWeightsAreZero"})
    c.properties.push_back(find_property(name));
  for (const auto& i : c.impls) EXPECT_NE(i, nullptr);
  for (const PropertyInfo* p : c.properties) EXPECT_NE(p, nullptr);
  c.run.seed = kDefaultSeed;
  c.run.cases = 20;
  c.run.real_sizes = false;
  c.run.save_failures_dir = fixtures;
  return c;
}

TEST(ParallelSession, AnyNumberOfProcessesGivesTheSameOutcomesInTheSameOrder) {
  const std::string dir = ::testing::TempDir() + "attncheck-jobs-" + std::to_string(::getpid());
  SessionConfig one = mixed_session(dir + "/one");
  const SessionResult a = run_session(one, {});
  ASSERT_GE(a.outcomes.size(), 9u);
  EXPECT_GT(a.count(PropertyStatus::failed), 0) << "the twins must fail for the claim to mean much";
  for (int jobs : {2, 3, 7}) {
    SCOPED_TRACE(jobs);
    // The same fixture paths, the first run's gone (or they would be
    // replayed before each search: the failure database).
    std::filesystem::remove_all(dir + "/one");
    SessionConfig many = mixed_session(dir + "/one");
    many.jobs = jobs;
    const SessionResult b = run_session(many, {});
    ASSERT_EQ(b.outcomes.size(), a.outcomes.size());
    for (size_t i = 0; i < a.outcomes.size(); ++i) {
      EXPECT_EQ(encode_outcome(b.outcomes[i]), encode_outcome(a.outcomes[i]))
          << a.outcomes[i].impl << " " << a.outcomes[i].property << "\n"
          << a.outcomes[i].message << "\n---\n" << b.outcomes[i].message;
    }
    EXPECT_EQ(b.counts, a.counts);
    EXPECT_EQ(b.max_budget, a.max_budget);
  }
}

// Ends its process at the first call: in-process (no isolation), so the
// process of the parallel run that calls it dies.
class Dies : public Implementation {
 public:
  Dies() : info_(find_impl("loop_f64")->info()) { info_.name = "dies_f64"; }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem&) const override { std::abort(); }

 private:
  ImplInfo info_;
};

// RowSumsToOne, 5 small cases, on `impls` in two processes.
SessionConfig row_sums_in_two_processes(std::vector<std::shared_ptr<const Implementation>> impls) {
  SessionConfig c;
  c.impls = std::move(impls);
  c.properties = {find_property("RowSumsToOne")};
  c.run.seed = kDefaultSeed;
  c.run.cases = 5;
  c.run.real_sizes = false;
  c.jobs = 2;
  return c;
}

// Killed from outside once (as the OOM killer kills): the first call of
// the run SIGKILLs its own process, leaving a marker file; every later call
// computes as loop_f64 does.
class KilledOnce : public Implementation {
 public:
  explicit KilledOnce(std::string marker)
      : info_(find_impl("loop_f64")->info()), marker_(std::move(marker)) {
    info_.name = "killed_once_f64";
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    if (!std::filesystem::exists(marker_)) {
      std::ofstream(marker_) << "killed\n";
      ::raise(SIGKILL);
    }
    return find_impl("loop_f64")->forward(p);
  }

 private:
  ImplInfo info_;
  std::string marker_;
};

TEST(ParallelSession, AnItemWhoseProcessIsKilledFromOutsideRunsOnceMore) {
  const std::string marker = ::testing::TempDir() + "attncheck-killed-" + std::to_string(::getpid());
  std::filesystem::remove(marker);
  SessionConfig c =
      row_sums_in_two_processes({find_impl("loop_f64"), std::make_shared<KilledOnce>(marker)});
  const SessionResult r = run_session(c, {});
  ASSERT_EQ(r.outcomes.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(marker)) << "the process was never killed";
  EXPECT_EQ(r.outcomes[1].status, PropertyStatus::passed) << r.outcomes[1].message;
  std::filesystem::remove(marker);
}

TEST(ParallelSession, AProcessThatDiesCostsItsItemOnly) {
  SessionConfig c = row_sums_in_two_processes(
      {find_impl("loop_f64"), std::make_shared<Dies>(), find_impl("batched_f32")});
  const SessionResult r = run_session(c, {});
  ASSERT_EQ(r.outcomes.size(), 3u);
  EXPECT_EQ(r.outcomes[0].status, PropertyStatus::passed) << r.outcomes[0].message;
  EXPECT_EQ(r.outcomes[1].status, PropertyStatus::failed);
  EXPECT_NE(r.outcomes[1].message.find("crashed with signal 6"), std::string::npos)
      << r.outcomes[1].message;
  EXPECT_EQ(r.outcomes[2].status, PropertyStatus::passed) << r.outcomes[2].message;
}

TEST(ParallelSession, AnInputErrorInAProcessIsTheRunsInputError) {
  SessionConfig c = row_sums_in_two_processes({find_impl("loop_f64"), find_impl("batched_f32")});
  // A finding whose fixture does not read: note_findings_gone throws.
  ExpectedFinding f;
  f.impls = {"batched_f32"};
  f.finding = KnownFinding{"empty_row_nan", "T", "r", "/nonexistent/fixture.json"};
  c.expected_failures.findings.push_back(f);
  EXPECT_THROW(run_session(c, {}), InputError);
}

// Items of threaded implementations (ImplInfo::threads) count their
// threads against --jobs: the threads of the items running at once never
// exceed it, and single-threaded items still run side by side. Each child
// logs "+i" when it starts item i and "-i" when it ends it.
TEST(ParallelSession, AnImplementationsThreadsCountAgainstTheJobs) {
  const std::string log = ::testing::TempDir() + "attncheck-threads-" + std::to_string(::getpid());
  const auto weight = [](size_t i) { return i % 4 == 1 ? 3 : 1; };  // 3, as ggml's _mt adapters
  for (int jobs : {3, 2}) {
    SCOPED_TRACE(jobs);
    std::remove(log.c_str());
    const size_t count = 12;
    ParallelCallbacks cb;
    cb.run_item = [&](size_t i, int) {
      const auto note = [&](char sign) {
        const std::string line = fmt::format("{}{}\n", sign, i);
        const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
        EXPECT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
        ::close(fd);
      };
      note('+');
      ::usleep(40000);
      note('-');
      ItemRun run;
      run.outcome.property = std::to_string(i);
      return run;
    };
    cb.outcome_of_death = [](size_t, const std::string& how) {
      ADD_FAILURE() << how;
      return PropertyOutcome{};
    };
    cb.hangs_key = [](size_t i) { return i; };
    cb.threads = [&](size_t i) { return weight(i); };
    std::vector<std::string> done;
    cb.done = [&](size_t, PropertyOutcome&& o, int) { done.push_back(o.property); };
    cb.cancelled = [] { return false; };
    cb.not_started = [](size_t) { return PropertyOutcome{}; };
    run_in_parallel(count, jobs, cb);
    ASSERT_EQ(done.size(), count);
    for (size_t i = 0; i < count; ++i) EXPECT_EQ(done[i], std::to_string(i));
    std::ifstream in(log);
    std::string line;
    int busy = 0, most = 0, most_single = 0, single = 0;
    while (std::getline(in, line)) {
      const size_t i = std::stoul(line.substr(1));
      const int w = std::min(weight(i), jobs);
      const int sign = line[0] == '+' ? 1 : -1;
      busy += sign * w;
      if (w == 1) single += sign;
      most = std::max(most, busy);
      most_single = std::max(most_single, single);
    }
    EXPECT_EQ(busy, 0);
    EXPECT_LE(most, jobs) << "more threads ran at once than --jobs";
    EXPECT_GE(most_single, 2) << "single-threaded items should run side by side";
  }
  std::remove(log.c_str());
}

TEST(ParallelSession, TheDefaultIsTheUsableCpusBoundedByMemory) {
  const int cpus = default_jobs(0);
  EXPECT_GE(cpus, 1);
  EXPECT_EQ(default_jobs(int64_t{1} << 40), 1);  // a petabyte per process: one
  EXPECT_LE(default_jobs(1), cpus);
}

}  // namespace
}  // namespace attncheck
