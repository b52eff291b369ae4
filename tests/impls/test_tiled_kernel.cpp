// Tests of the tiled kernel (tiled_f32, tiled_bf16) at the sizes where its
// tiles and splits branch: key lengths around its 128-key tile, a query
// tile of 64 and its partial successor, odd and wide head dims, GQA 8/2,
// causal bottom-right with tq < tk, and decode against 2049 keys with key
// padding through the split-K/V path, each within SPEC 4's tolerance of the
// certified oracle; and a split problem whose chunks have very different
// maxima, on which a combine that forgot exp(m_chunk - m) is shown to
// exceed the tolerance. Problems are B = H = 1 where they are long (the
// oracle's cost grows with B H tq tk).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "judge/compare.h"
#include "attncheck/oracle.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"
#include "impls/impl_common.h"
#include "impls/kernels_simd.h"
#include "impls/tiled_kernel.h"
#include "test_support.h"

namespace attncheck {
namespace {

using test_support::impl;
using test_support::Values;

const char* const kTiled[] = {"tiled_f32", "tiled_bf16"};

DType dtype_of(const ImplInfo& info) { return info.supports(DType::f32) ? DType::f32 : DType::bf16; }

Problem random_problem(DType dtype, int64_t batch, int64_t heads, int64_t kv_heads, int64_t tq,
                       int64_t tk, int64_t dk, int64_t dv, uint64_t seed) {
  Problem p = Problem::zeros(dtype, batch, heads, kv_heads, tq, tk, dk, dv);
  Values values(seed);
  for (double& x : p.q.data) x = values.next();
  for (double& x : p.k.data) x = values.next();
  for (double& x : p.v.data) x = values.next();
  return p;
}

// Runs `name` on p and compares every array it returns (out, lse) with the
// oracle within SPEC 4's tolerance for its declared precision; returns the
// largest budget used.
double expect_within_tolerance(const std::string& name, const Problem& p) {
  const auto i = impl(name);
  const ForwardResult r = i->forward(p);
  EXPECT_EQ(r.status, Status::ok) << name << ": " << r.error;
  if (r.status != Status::ok) return 0;
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, i->info().precision);
  EXPECT_EQ(t.ill_conditioned_rows, 0) << name;
  Comparison c;
  compare_kinds(c, returned_kinds(i->info(), kForwardKinds), p, o, r, t, CompareMode::tolerance);
  EXPECT_TRUE(c.ok()) << name << " tq " << p.tq << " tk " << p.tk << " dk " << p.dk << " dv "
                      << p.dv << "\n"
                      << c.describe_failures();
  EXPECT_GT(c.checked, 0);
  return c.max_budget_used;
}

TEST(TiledDeclarations, FloatAccumulation128KeyBlocksNoWeights) {
  for (const char* name : kTiled) {
    const ImplInfo& info = impl(name)->info();
    EXPECT_EQ(info.precision.accum, DType::f32) << name;
    EXPECT_EQ(info.precision.key_block, 128) << name;
    EXPECT_EQ(info.precision.exp_ulps, 1u) << name;
    EXPECT_FALSE(info.precision.flush_to_zero) << name;
    EXPECT_EQ(info.features, impls::kOnlineFeatures) << name;
    EXPECT_EQ(info.limits.max_tk, 0) << name;
    EXPECT_EQ(info.limits.dk_max, 0) << name;
  }
  EXPECT_EQ(impl("tiled_f32")->info().dtypes, dtype_bit(DType::f32));
  EXPECT_EQ(impl("tiled_f32")->info().precision.p_cast, DType::f32);
  EXPECT_EQ(impl("tiled_bf16")->info().dtypes, dtype_bit(DType::bf16));
  EXPECT_EQ(impl("tiled_bf16")->info().precision.p_cast, DType::bf16);
}

// The kernel's exp, which its declared exp_ulps = 1 rests on: within 0.51
// ulp of e^((x - ref) + shift) (long double reference) over 200,000
// arguments from -104 (near float's underflow) to 1.4, for the shifts the
// kernel uses ([-ln 2, ln 2]); e^-inf is exactly 0.
TEST(TiledKernel, ExpRebasedIsWithinHalfAnUlpAndAHundredth) {
  std::vector<float> x(200000);
  for (size_t k = 0; k < x.size(); ++k)
    x[k] = -104.0f + 105.4f * static_cast<float>(k) / static_cast<float>(x.size());
  for (const auto& [ref, shift] :
       std::vector<std::pair<float, double>>{{0.0f, 0.0}, {0.7f, 0.69}, {-3.25f, -0.5}, {1e4f, 0.1}}) {
    std::vector<float> y = x;
    for (float& v : y) v += ref;
    std::vector<float> got = y;
    impls::simd::exp_rebased(got.data(), static_cast<int64_t>(got.size()), ref, shift);
    double worst = 0;
    for (size_t k = 0; k < y.size(); ++k) {
      const long double exact =
          std::exp((static_cast<long double>(y[k]) - static_cast<long double>(ref)) + shift);
      if (exact < 0x1p-126L) continue;  // subnormal results: absolute, not ulps
      const double ulp = std::ldexp(1.0, std::ilogb(got[k]) - 23);
      worst = std::max(worst, static_cast<double>(std::fabs(got[k] - exact)) / ulp);
    }
    EXPECT_LE(worst, 0.51) << "ref " << ref << " shift " << shift;
  }
  float minus_inf = -INFINITY;
  impls::simd::exp_rebased(&minus_inf, 1, 2.0f, 0.5);
  EXPECT_EQ(minus_inf, 0.0f);
}

// Key lengths one below, at and one above the 128-key tile, and 1025 (a
// split for one query, nine tiles for 65); one query, a full query tile
// and one more than it (a second, one-row tile); dk 59 and 128, dv != dk.
TEST(TiledKernel, TileEdgesMatchTheOracle) {
  double worst = 0;
  uint64_t seed = 1;
  for (const char* name : kTiled) {
    const DType dtype = dtype_of(impl(name)->info());
    for (int64_t tk : {127, 128, 129, 1025}) {
      for (int64_t tq : {1, 64, 65}) {
        if (tk == 1025 && tq == 64) continue;  // 65 covers the multi-tile case
        const int64_t dk = tk % 2 == 1 ? 59 : 128;
        const Problem p = random_problem(dtype, 1, 1, 1, tq, tk, dk, 80, seed++);
        EXPECT_EQ(impls::tiled_splits(p), tq == 1 && tk == 1025);
        worst = std::max(worst, expect_within_tolerance(name, p));
      }
    }
  }
  RecordProperty("max_budget_used", std::to_string(worst));
}

// Decode against 2049 keys (five chunks, the last one key) with per-batch
// key padding: a padded tail, a few scattered holes, and for batch 1 a
// whole chunk padded (a chunk without a partial), GQA 8/2.
TEST(TiledKernel, SplitDecodeWithKeyPaddingMatchesTheOracle) {
  double worst = 0;
  for (const char* name : kTiled) {
    Problem p = random_problem(dtype_of(impl(name)->info()), 2, 8, 2, 1, 2049, 128, 128, 41);
    ASSERT_TRUE(impls::tiled_splits(p));
    p.key_valid.assign(2 * 2049, 1);
    for (int64_t j = 1700; j < 2049; ++j) p.key_valid[static_cast<size_t>(j)] = 0;
    for (int64_t j : {0, 127, 128, 511, 512, 1023}) p.key_valid[static_cast<size_t>(j)] = 0;
    for (int64_t j = 512; j < 1024; ++j) p.key_valid[static_cast<size_t>(2049 + j)] = 0;
    p.key_valid[static_cast<size_t>(2049 + 2048)] = 0;
    ASSERT_FALSE(p.has_empty_rows());
    worst = std::max(worst, expect_within_tolerance(name, p));
  }
  RecordProperty("max_budget_used", std::to_string(worst));
}

// Chunked prefill: tq < tk, causal bottom-right, GQA 8/2 across two query
// tiles (rows see 136 to 200 keys); and for the split path three queries
// against 1100 keys, causal bottom-right with a window that starts mid-tile.
TEST(TiledKernel, CausalBottomRightPrefillAndGqaMatchTheOracle) {
  double worst = 0;
  for (const char* name : kTiled) {
    const DType dtype = dtype_of(impl(name)->info());
    Problem p = random_problem(dtype, 1, 8, 2, 65, 200, 64, 48, 43);
    p.causal = true;
    p.align = Align::bottom_right;
    worst = std::max(worst, expect_within_tolerance(name, p));
    Problem d = random_problem(dtype, 1, 2, 1, 3, 1100, 59, 111, 47);
    d.causal = true;
    d.align = Align::bottom_right;
    d.window_left = 700;
    ASSERT_TRUE(impls::tiled_splits(d));
    worst = std::max(worst, expect_within_tolerance(name, d));
  }
  RecordProperty("max_budget_used", std::to_string(worst));
}

// The per-element features at multi-tile size: a random mask (each key
// allowed with probability 3/4), a bias, a softcap and a non-default scale
// over 65 queries x 140 keys (two query tiles, two key tiles), and the same
// on the split path.
TEST(TiledKernel, MaskBiasSoftcapMatchTheOracle) {
  double worst = 0;
  for (const char* name : kTiled) {
    const DType dtype = dtype_of(impl(name)->info());
    for (const auto& [tq, tk] : std::vector<std::pair<int64_t, int64_t>>{{65, 140}, {2, 600}}) {
      Problem p = random_problem(dtype, 1, 1, 1, tq, tk, 40, 40, 53);
      Values values(59);
      p.mask = Broadcast<uint8_t>{1, 1, std::vector<uint8_t>(static_cast<size_t>(tq * tk))};
      for (uint8_t& a : p.mask->data) a = values.next() > -1 ? 1 : 0;
      p.bias = Broadcast<double>{1, 1, std::vector<double>(static_cast<size_t>(tq * tk))};
      for (double& x : p.bias->data) x = values.next();
      p.softcap = 5;
      p.scale = 0.25;
      ASSERT_FALSE(p.has_empty_rows());
      EXPECT_EQ(impls::tiled_splits(p), tq == 2);
      worst = std::max(worst, expect_within_tolerance(name, p));
    }
  }
  RecordProperty("max_budget_used", std::to_string(worst));
}

// One query against four chunks whose maxima differ by 12 to 36: chunk 0
// holds keys with scores near 12, chunk 2 near -24, the others near 0;
// v_0 is -2 in chunk 0 and 2 elsewhere, so out_0 is near -2 and the
// unrescaled combine's near 1. The kernel matches the oracle; a combine that
// adds the chunks' partials without multiplying each by exp(m_chunk - m)
// (sum_c acc_c / sum_c l_c, each relative to its own max, computed here
// exactly in double) is far outside the same tolerance, so the first check
// fails for such a kernel.
TEST(TiledKernel, SplitCombineRescalesChunksWithDifferentMaxima) {
  const int64_t tk = 4 * impls::kSplitChunk;
  for (const char* name : kTiled) {
    Problem p = Problem::zeros(dtype_of(impl(name)->info()), 1, 1, 1, 1, tk, 2, 2);
    ASSERT_TRUE(impls::tiled_splits(p));
    p.scale = 1;
    p.q.at(0, 0, 0, 0) = 1;
    p.q.at(0, 0, 0, 1) = 1;
    Values values(61);
    for (int64_t j = 0; j < tk; ++j) {
      const int64_t chunk = j / impls::kSplitChunk;
      const double level = chunk == 0 ? 12 : chunk == 2 ? -24 : 0;
      p.k.at(0, 0, j, 0) = level;
      p.k.at(0, 0, j, 1) = values.next();  // scores spread by up to +-2
      p.v.at(0, 0, j, 0) = chunk == 0 ? -2 : 2;
      p.v.at(0, 0, j, 1) = values.next();
    }
    expect_within_tolerance(name, p);

    const OracleResult o = oracle(p);
    const Tolerances t = tolerances(p, o, impl(name)->info().precision);
    std::vector<double> acc(2, 0.0);
    double l = 0;
    for (int64_t c = 0; c < 4; ++c) {
      double m = -INFINITY;
      for (int64_t j = c * impls::kSplitChunk; j < (c + 1) * impls::kSplitChunk; ++j)
        m = std::max(m, o.scores[weight_index(p, 0, 0, 0, j)]);
      for (int64_t j = c * impls::kSplitChunk; j < (c + 1) * impls::kSplitChunk; ++j) {
        const double e = std::exp(o.scores[weight_index(p, 0, 0, 0, j)] - m);
        l += e;
        for (int64_t d = 0; d < 2; ++d) acc[static_cast<size_t>(d)] += e * p.v.at(0, 0, j, d);
      }
    }
    bool outside = false;
    for (int64_t d = 0; d < 2; ++d) {
      const double naive = acc[static_cast<size_t>(d)] / l;
      const size_t k = out_index(p, 0, 0, 0, d);
      outside = outside || std::fabs(naive - o.out[k]) > t.out[k];
    }
    EXPECT_TRUE(outside) << name << ": the problem does not tell the missing rescale";
  }
}

// Scores near 2^120 (beyond the first-order analysis, so not judged
// against the oracle) still give finite outputs inside the values' range,
// on the split path and on the tiled one: the power-of-two stabiliser is
// formed so the row's largest p stays in [1, 2] at any magnitude.
TEST(TiledKernel, HugeScoresStayFiniteAndInTheConvexHull) {
  for (const char* name : kTiled) {
    for (int64_t tq : {1, 65}) {
      Problem p = random_problem(dtype_of(impl(name)->info()), 1, 1, 1, tq, 700, 1, 1, 67);
      p.scale = 1;
      for (double& x : p.q.data) x = std::ldexp(x == 0 ? 1.0 : x, 60);
      for (double& x : p.k.data) x = std::ldexp(x, 60);
      const ForwardResult r = impl(name)->forward(p);
      ASSERT_EQ(r.status, Status::ok) << r.error;
      const auto [lo, hi] = std::minmax_element(p.v.data.begin(), p.v.data.end());
      for (double x : r.out) {
        ASSERT_TRUE(std::isfinite(x)) << name << " tq " << tq;
        EXPECT_GE(x, *lo) << name;
        EXPECT_LE(x, *hi) << name;
      }
    }
  }
}

// Values near float's largest (2^127.6) at the only allowed key of a row:
// the output is that value, within the tolerance. A stabiliser that let p
// reach 2 at the row's maximum would overflow the accumulator to inf here;
// heads with such values round the exponent up (p <= 1). Split (600 keys)
// and tiled (300) paths.
TEST(TiledKernel, ValuesNearFloatMaxDoNotOverflow) {
  for (const char* name : kTiled) {
    for (int64_t tk : {600, 300}) {
      Problem p = random_problem(dtype_of(impl(name)->info()), 1, 1, 1, 1, tk, 3, 2, 79);
      EXPECT_EQ(impls::tiled_splits(p), tk == 600);
      p.key_valid.assign(static_cast<size_t>(tk), 0);
      p.key_valid[200] = 1;
      // The score 5/8 puts p at 2^(5/8 log2 e - 0) = 1.87 when M is rounded
      // down: 1.87 x 1.5 x 2^127 overflows.
      p.scale = 1;
      for (int64_t d = 0; d < 3; ++d) {
        p.q.at(0, 0, 0, d) = d == 0 ? 1 : 0;
        p.k.at(0, 0, 200, d) = d == 0 ? 0.625 : 0;
      }
      p.v.at(0, 0, 200, 0) = std::ldexp(1.5, 127);  // exact in f32 and bf16
      p.v.at(0, 0, 200, 1) = -std::ldexp(1.5, 127);
      expect_within_tolerance(name, p);
    }
  }
}

TEST(TiledKernel, Bf16OutputsAreBf16) {
  Problem p = random_problem(DType::bf16, 1, 2, 1, 65, 300, 59, 24, 71);
  const ForwardResult r = impl("tiled_bf16")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  for (double x : r.out) EXPECT_TRUE(representable(DType::bf16, x)) << x;
}

TEST(TiledKernel, EmptyRowsAreAnError) {
  for (const char* name : kTiled) {
    Problem p = random_problem(dtype_of(impl(name)->info()), 1, 1, 1, 1, 600, 4, 4, 73);
    p.key_valid.assign(600, 0);
    const ForwardResult r = impl(name)->forward(p);
    EXPECT_NE(r.status, Status::ok) << name;
    EXPECT_NE(r.error.find("query (b="), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace attncheck
