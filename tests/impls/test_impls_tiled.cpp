// Tests of the tiled, local, multi-head and low-precision implementations:
// what each declares, the online kernels on fully masked and
// partial tail blocks, the local kernels' score count against the broken
// twin that masks the full matrix, the layer's parameter count and
// MultiHeadConsistency, the 16-bit kernels' rounding, and the new backward
// passes under GradientsMatchOracle.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/local_kernel.h"
#include "attncheck/layer.h"
#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"
#include "test_support.h"

namespace attncheck {

// Defined in properties/multihead.cpp; called directly so the test does not
// depend on the catalog listing it.
PropertyDef multihead_property();

namespace {

using test_support::impl;
using test_support::Values;

Problem random_problem(DType dtype, int64_t batch, int64_t heads, int64_t kv_heads, int64_t tq,
                       int64_t tk, int64_t dk, int64_t dv, uint64_t seed) {
  Problem p = Problem::zeros(dtype, batch, heads, kv_heads, tq, tk, dk, dv);
  Values values(seed);
  for (double& x : p.q.data) x = values.next();
  for (double& x : p.k.data) x = values.next();
  for (double& x : p.v.data) x = values.next();
  return p;
}

// Every output (and lse, where returned) within the SPEC 4 tolerance of the
// oracle for the implementation's declared traits.
void expect_matches_oracle(const Implementation& i, const Problem& p) {
  const ForwardResult r = i.forward(p);
  ASSERT_EQ(r.status, Status::ok) << i.info().name << ": " << r.error;
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, i.info().precision);
  ASSERT_EQ(t.ill_conditioned_rows, 0);
  ASSERT_EQ(r.out.size(), o.out.size());
  for (size_t k = 0; k < o.out.size(); ++k) {
    ASSERT_TRUE(std::isfinite(r.out[k])) << i.info().name << " out[" << k << "]";
    EXPECT_LE(std::fabs(r.out[k] - o.out[k]), t.out[k]) << i.info().name << " out[" << k << "]";
  }
  if (i.info().has(ATTNCHECK_FEATURE_LSE)) {
    ASSERT_EQ(r.lse.size(), o.lse.size());
    for (size_t k = 0; k < o.lse.size(); ++k)
      EXPECT_LE(std::fabs(r.lse[k] - o.lse[k]), t.lse[k]) << i.info().name << " lse[" << k << "]";
  }
}

RunConfig ci_config() {
  RunConfig c;
  c.seed = kDefaultSeed;
  return c;
}

TEST(Declarations, OnlineKernelsDeclareTheirBlocksAndNoWeights) {
  const std::vector<std::pair<std::string, int64_t>> blocks = {{"online_f32", 64},
                                                               {"online_f64", 64},
                                                               {"online_b4_f32", 4},
                                                               {"online_b4_f64", 4},
                                                               {"online_f16", 4}};
  for (const auto& [name, block] : blocks) {
    const ImplInfo& info = impl(name)->info();
    EXPECT_EQ(info.precision.key_block, block) << name;
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_WEIGHTS)) << name;
    EXPECT_TRUE(info.has(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_LSE | ATTNCHECK_FEATURE_MASK))
        << name;
  }
  for (const char* name : {"online_f32", "online_f64", "online_b4_f32", "online_b4_f64"})
    EXPECT_TRUE(impl(name)->info().has(ATTNCHECK_FEATURE_BACKWARD)) << name;
  for (const char* name : {"loop_f32", "batched_f32"})
    EXPECT_TRUE(impl(name)->info().has(ATTNCHECK_FEATURE_BACKWARD)) << name;
  for (const char* name : {"batched_f32", "batched_f64", "batched_bf16"})
    EXPECT_TRUE(impl(name)->info().has(ATTNCHECK_FEATURE_GQA)) << name;
}

TEST(Declarations, SixteenBitKernelsAccumulateInFloatAndCastP) {
  const ImplInfo& bf16 = impl("batched_bf16")->info();
  EXPECT_TRUE(bf16.supports(DType::bf16));
  EXPECT_EQ(bf16.dtypes, dtype_bit(DType::bf16));
  EXPECT_EQ(bf16.precision.accum, DType::f32);
  EXPECT_EQ(bf16.precision.p_cast, DType::bf16);
  const ImplInfo& f16 = impl("online_f16")->info();
  EXPECT_EQ(f16.dtypes, dtype_bit(DType::f16));
  EXPECT_EQ(f16.precision.accum, DType::f32);
  EXPECT_EQ(f16.precision.p_cast, DType::f16);
}

// Key padding empties the first two blocks of 4 of every row, and tk = 11
// leaves a tail block of 3: the running max is still -inf when the first
// allowed key arrives, and the last block is partial.
TEST(OnlineKernel, FullyMaskedLeadingBlocksAndPartialTail) {
  for (const char* name : {"online_b4_f32", "online_b4_f64", "online_f16"}) {
    const ImplInfo& info = impl(name)->info();
    const DType dtype = info.supports(DType::f64)   ? DType::f64
                        : info.supports(DType::f32) ? DType::f32
                                                    : DType::f16;
    Problem p = random_problem(dtype, 2, 4, 2, 5, 11, 3, 2, 7);
    p.key_valid.assign(22, 1);
    for (int64_t j = 0; j < 8; ++j) p.key_valid[static_cast<size_t>(j)] = 0;
    p.mask = Broadcast<uint8_t>{1, 1, std::vector<uint8_t>(55, 1)};
    p.mask->at(0, 0, 2, 10, 5, 11) = 0;  // one row's tail block loses a key
    ASSERT_FALSE(p.has_empty_rows());
    expect_matches_oracle(*impl(name), p);
    // Causal bottom-right too: late rows see every block, early ones few.
    Problem c = random_problem(dtype, 1, 2, 1, 6, 11, 2, 3, 9);
    c.causal = true;
    c.align = Align::bottom_right;
    expect_matches_oracle(*impl(name), c);
  }
}

TEST(OnlineKernel, BlockSizeChangesNothingBeyondTolerance) {
  // Scores spread wide, so the running max grows block after block.
  Problem p = random_problem(DType::f64, 1, 2, 2, 4, 19, 5, 3, 3);
  for (double& x : p.q.data) x *= 8;
  for (const char* name : {"online_f64", "online_b4_f64", "online_f32", "online_b4_f32"}) {
    Problem q = p;
    q.dtype = impl(name)->info().supports(DType::f64) ? DType::f64 : DType::f32;
    expect_matches_oracle(*impl(name), q);
  }
}

// The number of (b, h, i, j) whose key lies inside the window and causal
// limit of query i: what an honest local kernel may compute.
int64_t band_elements(const Problem& p) {
  int64_t n = 0;
  for (int64_t i = 0; i < p.tq; ++i) {
    const int64_t pos = p.position(i);
    for (int64_t j = 0; j < p.tk; ++j) {
      const bool inside = (p.window_left < 0 || j >= pos - p.window_left) &&
                          (p.window_right < 0 || j <= pos + p.window_right) &&
                          (!p.causal || j <= pos);
      n += inside ? 1 : 0;
    }
  }
  return n * p.batch * p.heads;
}

TEST(LocalAttention, CountsOnlyScoresInsideTheWindow) {
  // A narrow window over long rows: w = 4 keys of 64.
  for (const char* name : {"local_f32", "local_f64"}) {
    const auto local = impl(name);
    const DType dtype = local->info().supports(DType::f64) ? DType::f64 : DType::f32;
    EXPECT_FALSE(local->score_elements_computed().has_value()) << name << " before any call";
    Problem p = random_problem(dtype, 2, 2, 1, 64, 64, 4, 4, 11);
    p.window_left = 2;
    p.window_right = 1;
    ASSERT_EQ(local->forward(p).status, Status::ok);
    const auto count = local->score_elements_computed();
    ASSERT_TRUE(count.has_value()) << name;
    EXPECT_EQ(*count, band_elements(p)) << name;
    EXPECT_LE(*count, p.batch * p.heads * p.tq * 4) << name;
    EXPECT_LT(*count, p.score_elements() / 10) << name;
    // Causal with a left window of 7: at most 8 keys per query.
    p.window_right = -1;
    p.window_left = 7;
    p.causal = true;
    ASSERT_EQ(local->forward(p).status, Status::ok);
    EXPECT_EQ(*local->score_elements_computed(), band_elements(p)) << name;
    // Without a window it is global attention and says so.
    Problem g = random_problem(dtype, 1, 1, 1, 5, 7, 2, 2, 12);
    ASSERT_EQ(local->forward(g).status, Status::ok);
    EXPECT_EQ(*local->score_elements_computed(), g.score_elements()) << name;
  }
}

TEST(LocalAttention, BrokenTwinThatMasksTheFullMatrixIsCaughtByItsCount) {
  const auto twin = impls::broken_local_full_matrix();
  EXPECT_EQ(twin->info().kind, Kind::broken);
  Problem p = random_problem(DType::f64, 2, 2, 1, 64, 64, 4, 4, 11);
  p.window_left = 2;
  p.window_right = 1;
  const ForwardResult r = twin->forward(p);
  ASSERT_EQ(r.status, Status::ok);
  // Its values are right: only the cost claim is false.
  const ForwardResult honest = impl("local_f64")->forward(p);
  ASSERT_EQ(honest.out.size(), r.out.size());
  for (size_t k = 0; k < r.out.size(); ++k) EXPECT_NEAR(r.out[k], honest.out[k], 1e-14);
  const auto count = twin->score_elements_computed();
  ASSERT_TRUE(count.has_value());
  EXPECT_EQ(*count, p.score_elements());
  EXPECT_GT(*count, band_elements(p));  // the check local_* passes fails here
}

TEST(LocalAttention, EqualsGlobalAttentionWithTheBandMask) {
  Problem p = random_problem(DType::f64, 1, 2, 2, 9, 13, 3, 2, 5);
  p.window_left = 3;
  p.window_right = 2;
  p.align = Align::bottom_right;
  Problem banded = p;
  banded.window_left = banded.window_right = -1;
  banded.mask = Broadcast<uint8_t>{1, 1, std::vector<uint8_t>(9 * 13)};
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t j = 0; j < 13; ++j) banded.mask->at(0, 0, i, j, 9, 13) = p.allowed(0, 0, i, j);
  const ForwardResult local = impl("local_f64")->forward(p);
  const ForwardResult global = impl("loop_f64")->forward(banded);
  ASSERT_EQ(local.status, Status::ok);
  ASSERT_EQ(global.status, Status::ok);
  for (size_t k = 0; k < local.out.size(); ++k) EXPECT_NEAR(local.out[k], global.out[k], 1e-14);
  for (size_t k = 0; k < local.weights.size(); ++k)
    EXPECT_NEAR(local.weights[k], global.weights[k], 1e-15);
}

TEST(Layer, ParameterCountDoesNotDependOnHeadsAtFixedWidth) {
  const auto* layer = dynamic_cast<const Layer*>(impl("mha_f32").get());
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(impl("mha_f32")->info().kind, Kind::layer);
  // Exercise 4's d = 256 with H = 8 (dk = 32), and every other split.
  for (int64_t d : {1, 12, 64, 256}) {
    const int64_t one = layer->parameter_count(d, 1);
    EXPECT_EQ(one, 4 * d * d);
    for (int64_t h = 1; h <= d; ++h) {
      if (d % h != 0) continue;
      EXPECT_EQ(layer->parameter_count(d, h), one) << "d " << d << " heads " << h;
    }
  }
}

TEST(Layer, IdentityProjectionsGiveTheAttentionCore) {
  const auto mha = impl("mha_f32");
  const auto* layer = dynamic_cast<const Layer*>(mha.get());
  ASSERT_NE(layer, nullptr);
  const int64_t batch = 2, heads = 2, dk = 3, d = heads * dk, tq = 4, tk = 5;
  LayerWeights w;
  w.d_model = d;
  std::vector<double> identity(static_cast<size_t>(d * d), 0.0);
  for (int64_t c = 0; c < d; ++c) identity[static_cast<size_t>(c * d + c)] = 1;
  w.w_q = w.w_k = w.w_v = w.w_o = identity;
  LayerInput x;
  x.dtype = DType::f32;
  x.batch = batch;
  x.tq = tq;
  x.tk = tk;
  x.heads = heads;
  Values values(21);
  x.x_q.resize(static_cast<size_t>(batch * tq * d));
  x.x_kv.resize(static_cast<size_t>(batch * tk * d));
  for (double& v : x.x_q) v = values.next();
  for (double& v : x.x_kv) v = values.next();
  x.causal = true;
  const LayerResult y = layer->run(w, x);
  ASSERT_EQ(y.status, Status::ok) << y.error;
  // The same attention as a B x H x T x dk problem through forward().
  Problem p = Problem::zeros(DType::f32, batch, heads, heads, tq, tk, dk, dk);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < dk; ++c) {
        for (int64_t t = 0; t < tq; ++t)
          p.q.at(b, h, t, c) = x.x_q[static_cast<size_t>((b * tq + t) * d + h * dk + c)];
        for (int64_t t = 0; t < tk; ++t) {
          p.k.at(b, h, t, c) = x.x_kv[static_cast<size_t>((b * tk + t) * d + h * dk + c)];
          p.v.at(b, h, t, c) = p.k.at(b, h, t, c);
        }
      }
  p.causal = true;
  const ForwardResult core = mha->forward(p);
  ASSERT_EQ(core.status, Status::ok);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < tq; ++t)
        for (int64_t c = 0; c < dk; ++c)
          EXPECT_EQ(y.y[static_cast<size_t>((b * tq + t) * d + h * dk + c)],
                    core.out[out_index(p, b, h, t, c)]);
}

TEST(MultiHeadConsistency, PassesOnTheLayerAndCatchesTheWrongHeadSplit) {
  const PropertyDef prop = multihead_property();
  EXPECT_EQ(prop.name, "MultiHeadConsistency");
  const PropertyOutcome ok = run_property(prop, *impl("mha_f32"), DType::f32, ci_config());
  EXPECT_EQ(ok.status, PropertyStatus::passed) << ok.message;
  EXPECT_GT(ok.cases, 0);
  EXPECT_LE(ok.max_budget_used, 1.0);
  for (DType d : {DType::f32, DType::f64}) {
    const PropertyOutcome bad = run_property(prop, *impl("broken_mha_head_split"), d, ci_config());
    EXPECT_EQ(bad.status, PropertyStatus::failed) << bad.message;
    EXPECT_NE(bad.message.find("broken_mha_head_split"), std::string::npos);
    ASSERT_TRUE(bad.counterexample.has_value());
    // The bug needs two heads and two tokens; shrinking gets there.
    EXPECT_EQ(bad.counterexample->heads, 2);
  }
  // Not a layer: skipped, with the reason.
  const PropertyOutcome skip = run_property(prop, *impl("loop_f64"), DType::f64, ci_config());
  EXPECT_EQ(skip.status, PropertyStatus::skipped);
  EXPECT_FALSE(skip.message.empty());
  const PropertyOutcome broken_skip =
      run_property(prop, *impl("broken_no_max_subtraction"), DType::f64, ci_config());
  EXPECT_EQ(broken_skip.status, PropertyStatus::skipped) << broken_skip.message;
}

TEST(SixteenBit, OutputsAreInTheFormatAndMatchTheOracle) {
  for (const auto& [name, dtype] : std::vector<std::pair<std::string, DType>>{
           {"batched_bf16", DType::bf16}, {"online_f16", DType::f16}}) {
    Problem p = random_problem(dtype, 2, 2, 1, 6, 9, 4, 3, 17);
    p.causal = true;
    const ForwardResult r = impl(name)->forward(p);
    ASSERT_EQ(r.status, Status::ok) << name << ": " << r.error;
    for (double x : r.out) EXPECT_TRUE(representable(dtype, x)) << name << " " << x;
    expect_matches_oracle(*impl(name), p);
  }
}

TEST(SixteenBit, F16WithoutMaxSubtractionOverflowsAt65504) {
  // One score of 12: exp(12) = 162755 > 65504, far below float's 88.7.
  Problem p = Problem::zeros(DType::f16, 1, 1, 1, 1, 2, 1, 1);
  p.q.at(0, 0, 0, 0) = 12;
  p.k.at(0, 0, 0, 0) = 1;
  p.v.at(0, 0, 1, 0) = 1;
  p.scale = 1;
  const ForwardResult bad = impl("broken_f16_no_max_subtraction")->forward(p);
  ASSERT_EQ(bad.status, Status::ok);
  EXPECT_FALSE(std::isfinite(bad.out[0]));
  const ForwardResult good = impl("online_f16")->forward(p);
  ASSERT_EQ(good.status, Status::ok);
  EXPECT_TRUE(std::isfinite(good.out[0]));
}

// Gradients within their tolerance of the oracle's on problems with every
// feature the backward passes take (GradientsMatchOracle draws many more;
// its values stay moderate here, where no exact gradient can exceed the
// format's range).
TEST(Backward, NewBackwardPassesMatchTheOracle) {
  for (const char* name :
       {"loop_f32", "batched_f32", "online_f32", "online_f64", "online_b4_f32", "online_b4_f64"}) {
    const auto i = impl(name);
    const ImplInfo& info = i->info();
    const DType dtype = info.supports(DType::f64) ? DType::f64 : DType::f32;
    Problem p = random_problem(dtype, 2, 4, 2, 6, 11, 3, 2, 31);
    p.causal = true;
    p.align = Align::bottom_right;
    p.key_valid.assign(22, 1);
    p.key_valid[3] = p.key_valid[11 + 9] = 0;
    if (info.has(ATTNCHECK_FEATURE_SOFTCAP)) p.softcap = 3;
    if (info.has(ATTNCHECK_FEATURE_WINDOW)) p.window_left = 6;
    ASSERT_FALSE(p.has_empty_rows());
    Values values(37);
    p.dout.resize(static_cast<size_t>(2 * 4 * 6 * 2));
    for (double& x : p.dout) x = values.next();
    const BackwardResult r = i->backward(p);
    ASSERT_EQ(r.status, Status::ok) << name << ": " << r.error;
    const OracleResult o = oracle(p);
    const GradTolerances t = grad_tolerances(p, o, info.precision);
    ASSERT_EQ(t.ill_conditioned_rows, 0) << name;
    ASSERT_EQ(r.dq.size(), o.dq.size()) << name;
    ASSERT_EQ(r.dk.size(), o.dk.size()) << name;
    ASSERT_EQ(r.dv.size(), o.dv.size()) << name;
    for (size_t k = 0; k < o.dq.size(); ++k)
      EXPECT_LE(std::fabs(r.dq[k] - o.dq[k]), t.dq[k]) << name << " dq[" << k << "]";
    for (size_t k = 0; k < o.dk.size(); ++k)
      EXPECT_LE(std::fabs(r.dk[k] - o.dk[k]), t.dk[k]) << name << " dk[" << k << "]";
    for (size_t k = 0; k < o.dv.size(); ++k)
      EXPECT_LE(std::fabs(r.dv[k] - o.dv[k]), t.dv[k]) << name << " dv[" << k << "]";
  }
}

TEST(Backward, OnlineBackwardEqualsLoopBackwardOnGqa) {
  Problem p = random_problem(DType::f64, 2, 4, 2, 5, 11, 3, 2, 23);
  p.causal = true;
  p.align = Align::bottom_right;
  p.softcap = 2;
  Values values(29);
  p.dout.resize(static_cast<size_t>(2 * 4 * 5 * 2));
  for (double& x : p.dout) x = values.next();
  const BackwardResult loop = impl("loop_f64")->backward(p);
  for (const char* name : {"online_f64", "online_b4_f64"}) {
    const BackwardResult r = impl(name)->backward(p);
    ASSERT_EQ(r.status, Status::ok) << r.error;
    ASSERT_EQ(r.dk.size(), loop.dk.size());
    for (size_t k = 0; k < r.dq.size(); ++k) EXPECT_NEAR(r.dq[k], loop.dq[k], 1e-13) << name;
    for (size_t k = 0; k < r.dk.size(); ++k) EXPECT_NEAR(r.dk[k], loop.dk[k], 1e-13) << name;
    for (size_t k = 0; k < r.dv.size(); ++k) EXPECT_NEAR(r.dv[k], loop.dv[k], 1e-13) << name;
  }
}

}  // namespace
}  // namespace attncheck
