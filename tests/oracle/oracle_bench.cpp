// Times the oracle against loop_f64 on the same problems (issue 3: one
// head, dk = dv = 64, T = 16, 128, 512; target oracle / loop <= 20 at
// T = 512) and prints the ratio per T after the benchmarks.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "attncheck/oracle.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

constexpr int64_t kDim = 64;

// Normal queries and keys at the default scale give scores of order one,
// the regime the property suite generates most.
Problem bench_problem(int64_t t) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, t, t, kDim, kDim);
  std::mt19937_64 rng(static_cast<uint64_t>(t));
  std::normal_distribution<double> n(0, 1);
  for (auto* x : {&p.q, &p.k, &p.v})
    for (double& v : x->data) v = n(rng);
  return p;
}

const Implementation& loop_f64() {
  static const auto impl = find_impl("loop_f64");
  if (!impl) throw std::runtime_error("loop_f64 is not registered");
  return *impl;
}

void BM_Oracle(benchmark::State& state) {
  const Problem p = bench_problem(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(oracle(p));
}

void BM_LoopF64(benchmark::State& state) {
  const Problem p = bench_problem(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(loop_f64().forward(p));
}

BENCHMARK(BM_Oracle)->Arg(16)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoopF64)->Arg(16)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);

// Seconds per call of f, the best of a few timed batches.
template <typename F>
double seconds_per_call(F&& f) {
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    int calls = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              start)
                    .count();
    } while (elapsed < 0.2);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

void print_ratios() {
  std::printf("\noracle / loop_f64 (1 head, dk = dv = 64):\n");
  for (int64_t t : {16, 128, 512}) {
    const Problem p = bench_problem(t);
    const double o = seconds_per_call([&] { benchmark::DoNotOptimize(oracle(p)); });
    const double l = seconds_per_call(
        [&] { benchmark::DoNotOptimize(loop_f64().forward(p)); });
    const OracleResult r = oracle(p);
    std::printf("  T = %4lld: oracle %9.3f ms, loop_f64 %8.3f ms, ratio %6.1f"
                " (%zu uncertified)\n",
                static_cast<long long>(t), o * 1e3, l * 1e3, o / l,
                r.uncertified.size());
  }
}

}  // namespace
}  // namespace attncheck

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  attncheck::print_ratios();
  return 0;
}
