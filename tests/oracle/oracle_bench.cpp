// Times the oracle against loop_f64 on the same problems (one head,
// dk = dv = 64, T = 16, 128, 512; target oracle / loop <= 20 at T = 512),
// and the real-size reference, the enclosure with the tolerances it is
// compared against, streamed per head, against batched_f64 (B = 1, H = 8,
// tq = tk = 4096, dk = dv = 128, target within 3x; and decode over 16384
// keys), and prints the ratios after the benchmarks.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "attncheck/oracle.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"

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

const Implementation& batched_f64() {
  static const auto impl = find_impl("batched_f64");
  if (!impl) throw std::runtime_error("batched_f64 is not registered");
  return *impl;
}

// A real-size problem with f32 values (what the enclosure references).
Problem size_problem(int64_t heads, int64_t tq, int64_t tk, int64_t d) {
  Problem p = Problem::zeros(DType::f32, 1, heads, heads, tq, tk, d, d);
  std::mt19937_64 rng(static_cast<uint64_t>(tq * 7 + tk));
  std::normal_distribution<double> n(0, 1);
  for (auto* x : {&p.q, &p.k, &p.v})
    for (double& v : x->data) v = round_to(DType::f32, n(rng));
  return p;
}

// Head h of p as its own problem (the slice the reference streams over).
Problem head_of(const Problem& p, int64_t h) {
  Problem s = Problem::zeros(p.dtype, 1, 1, 1, p.tq, p.tk, p.dk, p.dv);
  s.scale = p.scale;
  for (int64_t i = 0; i < p.tq; ++i)
    for (int64_t c = 0; c < p.dk; ++c) s.q.at(0, 0, i, c) = p.q.at(0, h, i, c);
  for (int64_t j = 0; j < p.tk; ++j) {
    for (int64_t c = 0; c < p.dk; ++c) s.k.at(0, 0, j, c) = p.k.at(0, h, j, c);
    for (int64_t c = 0; c < p.dv; ++c) s.v.at(0, 0, j, c) = p.v.at(0, h, j, c);
  }
  return s;
}

// The enclosure and the tolerances of an f32 implementation, head by head.
double enclosure_and_tolerances(const Problem& p) {
  PrecisionTraits f32;
  f32.accum = DType::f32;
  f32.p_cast = DType::f32;
  double sink = 0;
  for (int64_t h = 0; h < p.heads; ++h) {
    const Problem s = head_of(p, h);
    const OracleResult e = enclose(s);
    const Tolerances t = tolerances(s, e, f32);
    sink += e.out[0] + t.out[0];
  }
  return sink;
}

void BM_Enclosure(benchmark::State& state) {
  const Problem p = size_problem(8, state.range(0), state.range(1), 128);
  for (auto _ : state) benchmark::DoNotOptimize(enclosure_and_tolerances(p));
}

void BM_BatchedF64(benchmark::State& state) {
  const Problem p = size_problem(8, state.range(0), state.range(1), 128);
  for (auto _ : state) benchmark::DoNotOptimize(batched_f64().forward(p));
}

BENCHMARK(BM_Enclosure)->Args({4096, 4096})->Args({1, 16384})->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_BatchedF64)->Args({4096, 4096})->Args({1, 16384})->Unit(benchmark::kMillisecond)->Iterations(1);

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
  std::printf("\nenclosure + tolerances (streamed per head) / batched_f64 (B 1, H 8, d 128):\n");
  for (auto [tq, tk] : {std::pair<int64_t, int64_t>{4096, 4096}, {1, 16384}}) {
    const Problem p = size_problem(8, tq, tk, 128);
    const auto time = [](auto&& f) {
      const auto start = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const double e = time([&] { benchmark::DoNotOptimize(enclosure_and_tolerances(p)); });
    const double b = time([&] { benchmark::DoNotOptimize(batched_f64().forward(p)); });
    std::printf("  tq %5lld tk %5lld: enclosure %8.3f s, batched_f64 %8.3f s, ratio %5.2f\n",
                static_cast<long long>(tq), static_cast<long long>(tk), e, b, e / b);
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
