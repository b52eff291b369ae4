// How `check --jobs N` scales (docs/development-and-ci.md): the wall time of
// one session, the same work list, at N = 1, 2, 4, ... up to this machine's
// CPUs, each reported with its speed-up over N = 1 measured in the same run
// (the counter "speedup"). Run by hand, never as a timed test:
//   build/tests/jobs_bench [--benchmark_repetitions=3]
// The work list: the CI profile's small cases (no real-size phase, so one
// unit never dominates) of every property on six reference implementations,
// isolated as `check` isolates them.

#include <benchmark/benchmark.h>

#include <chrono>

#include "attncheck/registry.h"
#include "attncheck/session.h"
#include "host/isolation.h"
#include "run/parallel_session.h"

namespace attncheck {
namespace {

double wall_at_one = 0;

void BM_CheckJobs(benchmark::State& state) {
  SessionConfig c;
  for (const char* name : {"loop_f64", "batched_f32", "online_f32", "tiled_f32", "mha_f32",
                           "local_f32"})
    if (auto impl = find_impl(name)) c.impls.push_back(impl);
  c.run.seed = kDefaultSeed;
  c.run.real_sizes = false;
  c.isolation = IsolationOptions{};
  c.jobs = static_cast<int>(state.range(0));
  int items = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const SessionResult r = run_session(c, {});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(s);
    items = static_cast<int>(r.outcomes.size());
    if (c.jobs == 1) wall_at_one = s;
    state.counters["speedup"] = wall_at_one > 0 ? wall_at_one / s : 0;
  }
  state.counters["items"] = items;
}

void jobs_args(benchmark::internal::Benchmark* b) {
  const int cpus = default_jobs(0);
  for (int n = 1; n < cpus; n *= 2) b->Arg(n);
  b->Arg(cpus);
}

BENCHMARK(BM_CheckJobs)->Apply(jobs_args)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace attncheck

int main(int argc, char** argv) {
  // Workers are this program started again in worker mode.
  if (const auto code = attncheck::worker_main(argc, argv)) return *code;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
