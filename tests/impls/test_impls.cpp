// Tests of the built-in implementations: the registry holds them, the
// references compute exercise 1 and agree with each other and the oracle,
// empty rows follow the declared policy, and every broken implementation
// really has its bug.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/registry.h"
#include "block_twins.h"
#include "serving_part_twins.h"
#include "size_dependent_twins.h"
#include "test_support.h"

namespace attncheck {
namespace {

const std::vector<std::string> kReferenceNames = {
    "batched_f32", "batched_f64", "loop_f32", "loop_f64", "loop_zero_f64"};

using test_support::impl;
using test_support::Values;

void fill(Tensor& t, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
          Values& values) {
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c)
        for (int64_t d = 0; d < d3; ++d) t.at(a, b, c, d) = values.next();
}

void fill_all(Problem& p, uint64_t seed) {
  Values values(seed);
  fill(p.q, p.batch, p.heads, p.tq, p.dk, values);
  fill(p.k, p.batch, p.kv_heads, p.tk, p.dk, values);
  fill(p.v, p.batch, p.kv_heads, p.tk, p.dv, values);
}

// Exercise 1: Q = K = I (2x2), V = [[2, 0], [0, 4]], default scale.
Problem exercise1(DType dtype) {
  Problem p = Problem::zeros(dtype, 1, 1, 1, 2, 2, 2, 2);
  p.q.at(0, 0, 0, 0) = p.q.at(0, 0, 1, 1) = 1;
  p.k.at(0, 0, 0, 0) = p.k.at(0, 0, 1, 1) = 1;
  p.v.at(0, 0, 0, 0) = 2;
  p.v.at(0, 0, 1, 1) = 4;
  return p;
}

// Bitwise in the sense of SPEC section 2: +0 equals -0, NaN equals nothing.
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

bool same_result(const ForwardResult& a, const ForwardResult& b) {
  return a.status == b.status && same_values(a.out, b.out) &&
         same_values(a.weights, b.weights) && same_values(a.lse, b.lse);
}

void expect_near_all(const std::vector<double>& got,
                     const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

TEST(Registry, HoldsTheReferenceImplementations) {
  for (const auto& name : kReferenceNames) {
    const auto found = find_impl(name);
    ASSERT_TRUE(found) << name;
    EXPECT_EQ(found->info().kind, Kind::reference) << name;
    EXPECT_FALSE(found->info().description.empty()) << name;
    EXPECT_EQ(found->info().precision.exp_ulps, 1u) << name;
    EXPECT_EQ(found->info().precision.key_block, 0) << name;
  }
  EXPECT_EQ(impl("loop_zero_f64")->info().empty_rows, EmptyRowPolicy::zero);
  EXPECT_EQ(impl("loop_f64")->info().empty_rows, EmptyRowPolicy::error);
  EXPECT_TRUE(impl("loop_f32")->info().supports(DType::f32));
  EXPECT_FALSE(impl("loop_f32")->info().supports(DType::f64));
  EXPECT_EQ(impl("loop_f32")->info().precision.accum, DType::f32);
  EXPECT_FALSE(impl("batched_f64")->info().has(ATTNCHECK_FEATURE_LSE));
}


TEST(Registry, EveryBrokenImplementationNamesItsProperty) {
  int broken = 0;
  for (const auto& i : registered_impls()) {
    if (i->info().kind != Kind::broken) continue;
    ++broken;
    EXPECT_NE(find_property(i->info().caught_by), nullptr)
        << i->info().name << " caught_by '" << i->info().caught_by << "'";
    // Serving-part twins are built on paged_online_f32 (serving_part_twins.h,
    // and the size-dependent paged one): no weights, and f64 only where
    // their formats allow.
    if (test_support::is_serving_part_twin(i->info().name) ||
        i->info().has(ATTNCHECK_FEATURE_PAGED_KV))
      continue;
    // The block kernel's twins take f32 outputs with block K/V only.
    if (test_support::is_block_twin(i->info().name) ||
        i->info().name == "broken_q8_scale_per_row")
      continue;
    EXPECT_FALSE(i->info().description.empty()) << i->info().name;
    // The staged twins (impls/broken/staged_lies.cpp) are the staged
    // kernel: no weights, llama.cpp's formats (q f32, K/V f16) only.
    const std::string& name = i->info().name;
    if (name == "broken_pv_f16_declared_f32" || name == "broken_path_misreported" ||
        name == "broken_pv_f16_stagnates" || name == "broken_q_f16_undeclared") {
      EXPECT_TRUE(name.starts_with("broken_"));
      continue;
    }
    EXPECT_TRUE(i->info().has(ATTNCHECK_FEATURE_WEIGHTS)) << i->info().name;
    EXPECT_TRUE(i->info().name.starts_with("broken_")) << i->info().name;
    // The lie of a 16-bit kernel's declaration exists only in its format.
    if (i->info().name != "broken_eager_bf16_undeclared_s_cast") {
      EXPECT_TRUE(i->info().supports(DType::f64)) << i->info().name;
    }
  }
  // At least 20 distinct bug classes real kernels shipped.
  EXPECT_GE(broken, 23);
}

TEST(Registry, OnlineBrokenImplementationsDeclareTheirBlock) {
  EXPECT_EQ(impl("broken_online_no_rescale")->info().precision.key_block, 2);
  EXPECT_EQ(impl("broken_online_drops_tail_block")->info().precision.key_block,
            4);
  EXPECT_EQ(impl("broken_online_masked_block_nan")->info().precision.key_block,
            2);
  // The bug is the order of its sum, not a declared nondeterminism.
  EXPECT_FALSE(impl("broken_nondeterministic_sum")
                   ->info()
                   .has(ATTNCHECK_FEATURE_NONDETERMINISTIC));
  // It declares the f64 traits it does not keep.
  EXPECT_EQ(impl("broken_f64_in_f32")->info().precision.accum, DType::f64);
  EXPECT_TRUE(
      impl("broken_strides_ignored")->info().has(ATTNCHECK_FEATURE_STRIDES));
}

TEST(Reference, Exercise1) {
  const std::vector<double> weights = {0.6698, 0.3302, 0.3302, 0.6698};
  const std::vector<double> out = {1.3395, 1.3210, 0.6605, 2.6790};
  for (const auto& name : kReferenceNames) {
    const auto i = impl(name);
    const DType dtype =
        i->info().supports(DType::f64) ? DType::f64 : DType::f32;
    const ForwardResult r = i->forward(exercise1(dtype));
    ASSERT_EQ(r.status, Status::ok) << name << ": " << r.error;
    expect_near_all(r.weights, weights, 5e-5, name + " weights");
    expect_near_all(r.out, out, 5e-5, name + " out");
  }
}

TEST(Reference, LoopAndBatchedAgree) {
  // Bottom-right causal with tk > tq and key padding that leaves every row
  // at least one key (query 0 sees keys 0..2).
  Problem p = Problem::zeros(DType::f64, 2, 3, 3, 5, 7, 4, 4);
  fill_all(p, 1);
  p.causal = true;
  p.align = Align::bottom_right;
  p.key_valid.assign(14, 1);
  p.key_valid[1] = 0;
  p.key_valid[7 + 5] = p.key_valid[7 + 6] = 0;
  ASSERT_FALSE(p.has_empty_rows());
  const ForwardResult loop = impl("loop_f64")->forward(p);
  const ForwardResult batched = impl("batched_f64")->forward(p);
  ASSERT_EQ(loop.status, Status::ok) << loop.error;
  ASSERT_EQ(batched.status, Status::ok) << batched.error;
  expect_near_all(batched.out, loop.out, 1e-13, "out");
  expect_near_all(batched.weights, loop.weights, 1e-13, "weights");
  EXPECT_TRUE(batched.lse.empty());
}

// Every feature at once: GQA, padded q strides, key padding, bottom-right
// causal, a window, a broadcast mask and bias, softcap and a non-default
// scale.
Problem every_feature() {
  Problem p = Problem::zeros(DType::f64, 2, 4, 2, 3, 6, 3, 2);
  p.q.data.assign(2 * 4 * 4 * 5, 0.0);
  p.q.strides = {4 * 4 * 5, 4 * 5, 5, 1};
  fill_all(p, 7);
  p.key_valid = {1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1};
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 3;
  p.window_right = 0;
  Broadcast<uint8_t> mask;
  mask.batch = 1;
  mask.heads = 4;
  mask.data.assign(4 * 3 * 6, 1);
  mask.at(0, 1, 2, 5, 3, 6) = 0;
  mask.at(0, 2, 0, 3, 3, 6) = 0;
  p.mask = mask;
  Broadcast<double> bias;
  bias.batch = 2;
  bias.heads = 1;
  Values values(11);
  for (int n = 0; n < 2 * 3 * 6; ++n) bias.data.push_back(values.next());
  p.bias = bias;
  p.softcap = 2.5;
  p.scale = 0.75;
  return p;
}

TEST(Reference, LoopMatchesOracleOnEveryFeature) {
  const Problem p = every_feature();
  ASSERT_NO_THROW(p.validate());
  ASSERT_FALSE(p.has_empty_rows());
  const ForwardResult r = impl("loop_f64")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  const OracleResult o = oracle(p);
  expect_near_all(r.out, o.out, 1e-12, "out");
  expect_near_all(r.weights, o.weights, 1e-12, "weights");
  expect_near_all(r.lse, o.lse, 1e-12, "lse");
}

TEST(Reference, ErrorPolicyRejectsEmptyRows) {
  for (const auto& name : kReferenceNames) {
    const auto i = impl(name);
    if (i->info().empty_rows != EmptyRowPolicy::error) continue;
    const DType dtype =
        i->info().supports(DType::f64) ? DType::f64 : DType::f32;
    Problem p = Problem::zeros(dtype, 2, 2, 2, 2, 3, 2, 2);
    fill_all(p, 3);
    p.key_valid = {1, 1, 1, 0, 0, 0};
    const ForwardResult r = i->forward(p);
    EXPECT_EQ(r.status, Status::error) << name;
    EXPECT_NE(r.error.find("query (b="), std::string::npos) << name;
    EXPECT_EQ(r.error, "query (b=1, h=0, i=0) has no allowed key") << name;
  }
}

TEST(Reference, ZeroPolicyGivesExactZeros) {
  // Bottom-right causal with tq > tk: query 0 sits before key 0.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 3, 2, 2, 2);
  fill_all(p, 5);
  p.causal = true;
  p.align = Align::bottom_right;
  const ForwardResult r = impl("loop_zero_f64")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  for (int64_t d = 0; d < 2; ++d) {
    EXPECT_EQ(r.out[out_index(p, 0, 0, 0, d)], 0.0);
    EXPECT_FALSE(std::signbit(r.out[out_index(p, 0, 0, 0, d)]));
  }
  for (int64_t j = 0; j < 2; ++j)
    EXPECT_EQ(r.weights[weight_index(p, 0, 0, 0, j)], 0.0);
  EXPECT_EQ(r.lse[0], -std::numeric_limits<double>::infinity());
  // The non-empty rows are computed as usual.
  EXPECT_EQ(r.weights[weight_index(p, 0, 0, 1, 0)], 1.0);
  EXPECT_NEAR(r.weights[weight_index(p, 0, 0, 2, 0)] +
                  r.weights[weight_index(p, 0, 0, 2, 1)],
              1.0, 1e-15);
  EXPECT_TRUE(std::isfinite(r.lse[1]) && std::isfinite(r.lse[2]));
}

// The same logical problem with q in [b][t][h][d] order and a padded head
// dimension, and k and v with padded rows; the gaps hold NaN so reading one
// would show.
Problem with_padded_strides(const Problem& p) {
  Problem s = p;
  const int64_t dkp = p.dk + 2, dvp = p.dv + 1;
  s.q.data.assign(static_cast<size_t>(p.batch * p.tq * p.heads * dkp),
                  std::nan(""));
  s.q.strides = {p.tq * p.heads * dkp, dkp, p.heads * dkp, 1};
  s.k.data.assign(static_cast<size_t>(p.batch * p.kv_heads * p.tk * dkp),
                  std::nan(""));
  s.k.strides = {p.kv_heads * p.tk * dkp, p.tk * dkp, dkp, 1};
  s.v.data.assign(static_cast<size_t>(p.batch * p.kv_heads * p.tk * dvp),
                  std::nan(""));
  s.v.strides = {p.kv_heads * p.tk * dvp, p.tk * dvp, dvp, 1};
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t t = 0; t < p.tq; ++t)
        for (int64_t d = 0; d < p.dk; ++d)
          s.q.at(b, h, t, d) = p.q.at(b, h, t, d);
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t t = 0; t < p.tk; ++t) {
        for (int64_t d = 0; d < p.dk; ++d)
          s.k.at(b, g, t, d) = p.k.at(b, g, t, d);
        for (int64_t d = 0; d < p.dv; ++d)
          s.v.at(b, g, t, d) = p.v.at(b, g, t, d);
      }
  }
  return s;
}

TEST(Reference, StridedInputsGiveBitwiseTheSameResult) {
  for (const std::string name : {"loop_f64", "loop_f32"}) {
    const auto i = impl(name);
    const DType dtype =
        i->info().supports(DType::f64) ? DType::f64 : DType::f32;
    Problem p = Problem::zeros(dtype, 2, 2, 1, 3, 4, 3, 2);
    fill_all(p, 9);
    p.causal = true;
    const Problem strided = with_padded_strides(p);
    ASSERT_NO_THROW(strided.validate()) << name;
    const ForwardResult a = i->forward(p);
    const ForwardResult b = i->forward(strided);
    ASSERT_EQ(a.status, Status::ok) << name << ": " << a.error;
    EXPECT_TRUE(same_result(a, b)) << name;
  }
}

// One query, two keys, dk = 1: the smallest case for most of the bugs.
Problem one_query(double q, double k0, double k1, double v0, double v1) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 1, 1);
  p.q.at(0, 0, 0, 0) = q;
  p.k.at(0, 0, 0, 0) = k0;
  p.k.at(0, 0, 1, 0) = k1;
  p.v.at(0, 0, 0, 0) = v0;
  p.v.at(0, 0, 1, 0) = v1;
  return p;
}

// One query, dk = 1 and as many keys as `k` has.
Problem one_query_keys(double q, const std::vector<double>& k,
                       const std::vector<double>& v) {
  const auto tk = static_cast<int64_t>(k.size());
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, tk, 1, 1);
  p.q.at(0, 0, 0, 0) = q;
  for (int64_t j = 0; j < tk; ++j) {
    p.k.at(0, 0, j, 0) = k[static_cast<size_t>(j)];
    p.v.at(0, 0, j, 0) = v[static_cast<size_t>(j)];
  }
  return p;
}

// Two queries, two keys, dk = 1: query 0 and 1 differ, keys differ.
Problem two_by_two() {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 2, 1, 1);
  p.q.at(0, 0, 0, 0) = 1;
  p.q.at(0, 0, 1, 0) = 2;
  p.k.at(0, 0, 0, 0) = 1;
  p.k.at(0, 0, 1, 0) = -1;
  p.v.at(0, 0, 0, 0) = 1;
  p.v.at(0, 0, 1, 0) = 2;
  return p;
}

struct BugCase {
  std::string name;
  Problem problem;
  // The reference with the declared empty-row policy; the implementation's
  // own name means "its own second call" (for Determinism).
  std::string correct;
};

std::vector<BugCase> bug_cases() {
  std::vector<BugCase> cases;
  {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 2, 1, 1);
    p.q.at(0, 0, 0, 0) = 1;
    p.q.at(0, 0, 1, 0) = 2;
    p.k.at(0, 0, 0, 0) = 1;
    p.k.at(0, 0, 1, 0) = -1;
    p.v.at(0, 0, 0, 0) = 1;
    p.v.at(0, 0, 1, 0) = 2;
    cases.push_back({"broken_softmax_query_axis", p, "loop_f64"});
  }
  cases.push_back(
      {"broken_sum_skips_first_key", one_query(1, 1, 0, 1, 2), "loop_f64"});
  {
    Problem p = one_query(1, 1, 0, 1, 2);
    p.key_valid = {1, 0};
    cases.push_back({"broken_finite_mask_fill", p, "loop_f64"});
  }
  {
    // The masked score 1000 makes every allowed exponent underflow.
    Problem p = one_query(1, 1, 1000, 1, 2);
    p.key_valid = {1, 0};
    cases.push_back({"broken_max_over_masked", p, "loop_f64"});
  }
  cases.push_back(
      {"broken_alibi_always_on", one_query(1, 1, 1, 1, 2), "loop_f64"});
  {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 4, 1);
    for (int64_t d = 0; d < 4; ++d) p.q.at(0, 0, 0, d) = p.k.at(0, 0, 0, d) = 1;
    p.v.at(0, 0, 1, 0) = 1;
    cases.push_back({"broken_unscaled", p, "loop_f64"});
    cases.push_back({"broken_scale_over_dk", p, "loop_f64"});
  }
  {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 1, 1, 1);
    p.causal = true;
    p.align = Align::bottom_right;
    p.v.at(0, 0, 0, 0) = 3;
    cases.push_back({"broken_empty_row_nan", p, "loop_f64"});
    cases.push_back({"broken_empty_row_uniform", p, "loop_zero_f64"});
  }
  {
    Problem p = one_query(1, 1, 0, 3, 3);
    cases.push_back({"broken_extra_logit", p, "loop_f64"});
  }
  // exp(800) overflows to inf.
  cases.push_back(
      {"broken_no_max_subtraction", one_query(1, 800, 0, 1, 2), "loop_f64"});
  {
    // The masked score 2e9 minus 1e9 still beats the allowed score 1.
    Problem p = one_query(1, 1, 2e9, 1, 2);
    p.key_valid = {1, 0};
    cases.push_back({"broken_mask_fill_1e9", p, "loop_f64"});
  }
  {
    Problem p = two_by_two();
    p.causal = true;
    cases.push_back({"broken_causal_off_by_one", p, "loop_f64"});
  }
  {
    // Top-left: the query sees key 0 only; bottom-right would add key 1.
    Problem p = one_query(1, 1, 0, 1, 2);
    p.causal = true;
    cases.push_back({"broken_alignment_swapped", p, "loop_f64"});
  }
  {
    Problem p = one_query(1, 1, 0, 1, 2);
    Broadcast<uint8_t> mask;
    mask.data = {1, 0};
    p.mask = mask;
    cases.push_back({"broken_mask_polarity_inverted", p, "loop_f64"});
  }
  {
    Problem p = two_by_two();
    p.key_valid = {1, 0};
    cases.push_back({"broken_key_padding_on_queries", p, "loop_f64"});
  }
  {
    Problem p = Problem::zeros(DType::f64, 1, 4, 2, 1, 2, 1, 1);
    fill_all(p, 17);
    cases.push_back({"broken_wrong_kv_head", p, "loop_f64"});
  }
  // The max sits in the second block of 2.
  cases.push_back({"broken_online_no_rescale",
                   one_query_keys(1, {0, 0, 1, 1}, {0, 0, 1, 1}), "loop_f64"});
  // tk = 5: key 4 is the partial block.
  cases.push_back({"broken_online_drops_tail_block",
                   one_query_keys(1, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 1}),
                   "loop_f64"});
  {
    Problem p = one_query_keys(1, {0, 1, 2, 3}, {0, 1, 2, 3});
    p.key_valid = {0, 0, 1, 1};
    cases.push_back({"broken_online_masked_block_nan", p, "loop_f64"});
  }
  {
    // Bottom-right, the query at key 1 with window [p - 1, p].
    Problem p = one_query(1, 1, 0, 1, 2);
    p.align = Align::bottom_right;
    p.window_left = 1;
    p.window_right = 0;
    cases.push_back({"broken_window_off_by_one", p, "loop_f64"});
  }
  {
    Problem p = Problem::zeros(DType::f64, 2, 2, 1, 3, 4, 3, 2);
    fill_all(p, 9);
    cases.push_back(
        {"broken_strides_ignored", with_padded_strides(p), "loop_f64"});
  }
  cases.push_back({"broken_f64_in_f32", one_query(0.1, 0.3, 0.7, 0.1, 0.2),
                   "loop_f64"});
  {
    // Three keys, the fewest whose sum order can matter; on this case every
    // start key gives different bits.
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 3, 3, 2, 1);
    fill_all(p, 10);
    cases.push_back(
        {"broken_nondeterministic_sum", p, "broken_nondeterministic_sum"});
  }
  {
    // Batch 0's scores are 0, batch 1's reach 800: exp(800 - 0) overflows.
    Problem p = Problem::zeros(DType::f64, 2, 1, 1, 1, 2, 1, 1);
    p.q.at(1, 0, 0, 0) = 1;
    p.k.at(1, 0, 0, 0) = 800;
    p.v.at(1, 0, 0, 0) = 1;
    cases.push_back({"broken_batch_head_leak", p, "loop_f64"});
  }
  {
    Problem p = one_query(1, 1, 0, 1, 1);
    p.key_valid = {1, 0};
    cases.push_back({"broken_mask_after_softmax", p, "loop_f64"});
  }
  // Both scores clamp to 30.
  cases.push_back(
      {"broken_score_clamp", one_query(1, 100, 50, 1, 2), "loop_f64"});
  cases.push_back(
      {"broken_zero_values_as_padding", one_query(1, 1, 0, 0, 2), "loop_f64"});
  cases.push_back(
      {"broken_approx_reciprocal", one_query(1, 1, 0, 1, 1), "loop_f64"});
  cases.push_back(
      {"broken_fused_relu", one_query(1, 1, 0, -1, -2), "loop_f64"});
  cases.push_back(
      {"broken_key_l2_normalised", one_query(1, 2, 0, 1, 2), "loop_f64"});
  {
    // Key 16 (the 17th) holds the only nonzero value and the largest score.
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 17, 1, 1);
    p.q.at(0, 0, 0, 0) = 1;
    p.k.at(0, 0, 16, 0) = 2;
    p.v.at(0, 0, 16, 0) = 1;
    cases.push_back({"broken_fixed_key_tile", p, "loop_f64"});
  }
  // Scores 0 and -80: e^-80 = 1.8e-35 is below 2^-100, a normal double.
  cases.push_back({"broken_exp_flushes_tiny", one_query(1, 0, -80, 0, 1), "loop_f64"});
  // Scores 800 and 790: exp(800) overflows without the max subtracted.
  cases.push_back({"broken_f16_no_max_subtraction", one_query(1, 800, 790, 1, 2), "loop_f64"});
  // Front ends that check for empty rows with their bug's rule: an error
  // where each query sees a key.
  {
    // Top-left: query 0 sees key 0 only, the diagonal.
    Problem p = one_query(1, 1, 0, 1, 2);
    p.causal = true;
    cases.push_back({"broken_causal_strict_rejects", p, "loop_f64"});
    // A window of left 0: the query sees its own position only.
    p.window_left = 0;
    cases.push_back({"broken_window_strict_rejects", p, "loop_f64"});
  }
  {
    // Key 1 padded: query 1 is taken for padded.
    Problem p = two_by_two();
    p.key_valid = {1, 0};
    cases.push_back({"broken_query_padding_rejects", p, "loop_f64"});
  }
  {
    // Top-left, tq 2 > tk 1: under bottom-right query 0 sits before key 0.
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 1, 1, 1);
    p.causal = true;
    cases.push_back({"broken_alignment_swapped_rejects", p, "loop_f64"});
  }
  return cases;
}

TEST(Broken, EachBugShowsOnItsCase) {
  const auto cases = bug_cases();
  for (const auto& c : cases) {
    const auto bad = impl(c.name);
    ASSERT_NO_THROW(c.problem.validate()) << c.name;
    const ForwardResult got = bad->forward(c.problem);
    const ForwardResult want = impl(c.correct)->forward(c.problem);
    EXPECT_FALSE(same_result(got, want)) << c.name;
  }
  // Every registered broken implementation with a forward bug has a case
  // here; the backward bugs have correct forward passes.
  for (const auto& i : registered_impls()) {
    if (i->info().kind != Kind::broken) continue;
    // Their forward (the attention core) is correct: the bug is in the
    // backward pass or the layer's projections.
    // (or its cost: broken_local_full_matrix computes the right values the
    // expensive way).
    // broken_eager_bf16_undeclared_s_cast computes what eager_bf16 does:
    // its bug is its declaration (tests/impls/test_eager.cpp).
    // broken_pv_f16_declared_f32 and broken_path_misreported compute what
    // staged_pv_f16 computes: their bug is their declaration, or the path
    // they name (tests/judge/test_tolerance_by_stage.cpp, and the
    // BrokenImplementation of tests/run/test_driver.cpp).
    if (i->info().caught_by == "GradientsMatchOracle" ||
        i->info().caught_by == "MultiHeadConsistency" ||
        i->info().name == "broken_local_full_matrix" ||
        i->info().name == "broken_eager_bf16_undeclared_s_cast" ||
        i->info().name == "broken_pv_f16_declared_f32" ||
        i->info().name == "broken_path_misreported") {
      continue;
    }
    // Their cases are of real size, in test_broken_at_size.
    if (test_support::caught_only_at_real_size(i->info().name)) continue;
    // Their cases are serving problems, in test_serving_impls.
    if (test_support::is_serving_part_twin(i->info().name) ||
        test_support::is_serving_twin(i->info().name))
      continue;
    // Their cases are block problems, in test_quant_kv.
    if (test_support::is_block_twin(i->info().name)) continue;
    EXPECT_TRUE(
        std::any_of(cases.begin(), cases.end(),
                    [&](const BugCase& c) { return c.name == i->info().name; }))
        << i->info().name << " has no bug case";
  }
}

TEST(Broken, BugsHaveTheirShape) {
  const auto sum = [](const std::vector<double>& w) {
    double s = 0;
    for (double x : w) s += x;
    return s;
  };
  const auto cases = bug_cases();
  const auto problem_of = [&](const std::string& name) -> const Problem& {
    for (const auto& c : cases)
      if (c.name == name) return c.problem;
    throw std::runtime_error("no case for " + name);
  };
  const auto run = [&](const std::string& name) {
    return impl(name)->forward(problem_of(name));
  };
  EXPECT_GT(sum(run("broken_sum_skips_first_key").weights), 1.01);
  EXPECT_GT(run("broken_finite_mask_fill").weights[1], 0.0);
  EXPECT_TRUE(std::isnan(run("broken_max_over_masked").out[0]));
  EXPECT_NE(run("broken_alibi_always_on").weights[0], 0.5);
  const ForwardResult nan_row = run("broken_empty_row_nan");
  EXPECT_EQ(nan_row.status, Status::ok);
  EXPECT_TRUE(std::isnan(nan_row.out[0]));
  const ForwardResult uniform = run("broken_empty_row_uniform");
  EXPECT_EQ(uniform.weights[0], 1.0);
  EXPECT_EQ(uniform.out[0], 3.0);
  EXPECT_LT(run("broken_extra_logit").out[0], 3.0);

  EXPECT_TRUE(std::isnan(run("broken_no_max_subtraction").out[0]));
  const ForwardResult fill_1e9 = run("broken_mask_fill_1e9");
  EXPECT_EQ(fill_1e9.weights[1], 1.0);
  EXPECT_EQ(fill_1e9.out[0], 2.0);
  // Query 0 sees key 1.
  EXPECT_GT(run("broken_causal_off_by_one").weights[1], 0.0);
  EXPECT_EQ(run("broken_causal_strict_rejects").error, "query (b=0, h=0, i=0) has no allowed key");
  EXPECT_EQ(run("broken_window_strict_rejects").error, "query (b=0, h=0, i=0) has no allowed key");
  EXPECT_EQ(run("broken_query_padding_rejects").error, "query (b=0, h=0, i=1) has no allowed key");
  EXPECT_EQ(run("broken_alignment_swapped_rejects").error,
            "query (b=0, h=0, i=0) has no allowed key");
  EXPECT_GT(run("broken_alignment_swapped").weights[1], 0.0);
  const ForwardResult inverted = run("broken_mask_polarity_inverted");
  EXPECT_EQ(inverted.weights[0], 0.0);
  EXPECT_EQ(inverted.weights[1], 1.0);
  // Row 0 sees the padded key 1; row 1, "padded", is zero.
  const ForwardResult on_queries = run("broken_key_padding_on_queries");
  EXPECT_GT(on_queries.weights[1], 0.0);
  EXPECT_EQ(on_queries.out[1], 0.0);
  EXPECT_EQ(on_queries.weights[2] + on_queries.weights[3], 0.0);
  {
    // h % 2 and h / 2 agree for heads 0 and 3 only.
    const ForwardResult got = run("broken_wrong_kv_head");
    const ForwardResult want =
        impl("loop_f64")->forward(problem_of("broken_wrong_kv_head"));
    EXPECT_EQ(got.out[0], want.out[0]);
    EXPECT_EQ(got.out[3], want.out[3]);
    EXPECT_NE(got.out[1], want.out[1]);
    EXPECT_NE(got.out[2], want.out[2]);
  }
  // Each block's exp(0) counted at weight 1: four equal weights.
  for (double a : run("broken_online_no_rescale").weights) EXPECT_EQ(a, 0.25);
  const ForwardResult tail = run("broken_online_drops_tail_block");
  EXPECT_EQ(tail.weights[4], 0.0);
  EXPECT_EQ(tail.out[0], 0.0);
  const ForwardResult nan_block = run("broken_online_masked_block_nan");
  EXPECT_TRUE(std::isnan(nan_block.out[0]));
  EXPECT_TRUE(std::isnan(nan_block.weights[0]));
  const ForwardResult window = run("broken_window_off_by_one");
  EXPECT_EQ(window.weights[0], 0.0);
  EXPECT_EQ(window.weights[1], 1.0);
  // The misread lands on the NaN gaps of the padded layout.
  const ForwardResult strided = run("broken_strides_ignored");
  EXPECT_TRUE(std::any_of(strided.out.begin(), strided.out.end(),
                          [](double x) { return std::isnan(x); }));
  {
    // Float results: within f32 roundoff of the f64 ones, not f64 roundoff.
    const ForwardResult got = run("broken_f64_in_f32");
    const ForwardResult want =
        impl("loop_f64")->forward(problem_of("broken_f64_in_f32"));
    EXPECT_NEAR(got.out[0], want.out[0], 1e-6);
    EXPECT_GT(std::fabs(got.out[0] - want.out[0]), 1e-12);
  }
  const ForwardResult leak = run("broken_batch_head_leak");
  EXPECT_EQ(leak.out[0], 0.0);
  EXPECT_TRUE(std::isnan(leak.out[1]));
  // Every allowed value is 1, yet the output is below the hull [1, 1].
  const ForwardResult after = run("broken_mask_after_softmax");
  EXPECT_EQ(after.weights[1], 0.0);
  EXPECT_LT(after.out[0], 1.0);
  const ForwardResult clamp = run("broken_score_clamp");
  EXPECT_EQ(clamp.weights[0], 0.5);
  EXPECT_EQ(clamp.weights[1], 0.5);
  const ForwardResult zero_v = run("broken_zero_values_as_padding");
  EXPECT_EQ(zero_v.weights[0], 0.0);
  EXPECT_EQ(zero_v.out[0], 2.0);
  EXPECT_GT(run("broken_approx_reciprocal").out[0], 1.0);
  EXPECT_EQ(run("broken_fused_relu").out[0], 0.0);
  // Key 0 scaled from 2 to 1.
  EXPECT_LT(run("broken_key_l2_normalised").weights[0],
            impl("loop_f64")
                ->forward(problem_of("broken_key_l2_normalised"))
                .weights[0]);
}

TEST(Broken, NondeterministicSumDiffersBetweenIdenticalCalls) {
  const auto cases = bug_cases();
  const auto c =
      std::find_if(cases.begin(), cases.end(), [](const BugCase& b) {
        return b.name == "broken_nondeterministic_sum";
      });
  ASSERT_NE(c, cases.end());
  const auto bad = impl(c->name);
  const ForwardResult want = impl("loop_f64")->forward(c->problem);
  // The sum's start cycles with period tk: every consecutive pair of calls
  // differs on this case, whatever the call count so far, and each call is
  // right to roundoff.
  ForwardResult previous = bad->forward(c->problem);
  for (int64_t n = 0; n < c->problem.tk; ++n) {
    const ForwardResult next = bad->forward(c->problem);
    EXPECT_FALSE(same_result(previous, next)) << "call " << n;
    expect_near_all(next.out, want.out, 1e-15, "out");
    expect_near_all(next.weights, want.weights, 1e-15, "weights");
    previous = next;
  }
}

TEST(Broken, BatchHeadLeakCouplesBatches) {
  Problem p = Problem::zeros(DType::f64, 2, 2, 2, 3, 4, 2, 2);
  fill_all(p, 23);
  Problem changed = p;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t d = 0; d < 2; ++d) changed.q.at(0, h, i, d) *= 4;
  const auto batch1 = [&](const ForwardResult& r) {
    const auto half = static_cast<std::ptrdiff_t>(r.out.size() / 2);
    return std::vector<double>(r.out.begin() + half, r.out.end());
  };
  const auto correct = impl("loop_f64");
  EXPECT_TRUE(same_values(batch1(correct->forward(p)),
                          batch1(correct->forward(changed))));
  const auto bad = impl("broken_batch_head_leak");
  const ForwardResult before = bad->forward(p), after = bad->forward(changed);
  EXPECT_FALSE(same_values(batch1(before), batch1(after)));
  // Only the rounding moves on moderate scores.
  expect_near_all(batch1(after), batch1(correct->forward(p)), 1e-14, "out");
}

struct InvisibleCase {
  std::string name;
  Problem problem;
  double tol;  // 0: bitwise equal to loop_f64
};

// Problems outside each bug's trigger: there the broken implementation
// agrees with loop_f64, so the bug is exactly the named one.
std::vector<InvisibleCase> invisible_cases() {
  std::vector<InvisibleCase> cases;
  const auto random = [](int64_t batch, int64_t heads, int64_t kv_heads,
                         int64_t tq, int64_t tk, uint64_t seed) {
    Problem p =
        Problem::zeros(DType::f64, batch, heads, kv_heads, tq, tk, 2, 2);
    fill_all(p, seed);
    return p;
  };
  // Moderate scores: exp(s) neither overflows nor underflows.
  cases.push_back(
      {"broken_no_max_subtraction", random(2, 2, 2, 3, 4, 31), 1e-14});
  {
    // Ordinary masked scores: exp(s - 1e9 - m) is exactly 0.
    Problem p = random(2, 2, 1, 3, 4, 32);
    p.key_valid = {1, 0, 1, 0, 0, 1, 1, 1};
    cases.push_back({"broken_mask_fill_1e9", p, 0});
  }
  {
    // A window ending at p_i hides the extra causal key; so does no causal.
    Problem p = random(1, 2, 2, 3, 4, 33);
    cases.push_back({"broken_causal_off_by_one", p, 0});
    p.causal = true;
    p.window_right = 0;
    cases.push_back({"broken_causal_off_by_one", p, 0});
  }
  {
    // tq == tk: both alignments put query i at key i.
    Problem p = random(1, 2, 1, 4, 4, 34);
    p.causal = true;
    p.window_left = 1;
    cases.push_back({"broken_alignment_swapped", p, 0});
  }
  {
    // No explicit mask: key padding and causal are read right.
    Problem p = random(2, 1, 1, 3, 3, 35);
    p.key_valid = {1, 0, 1, 1, 1, 0};
    p.causal = true;
    p.align = Align::bottom_right;
    cases.push_back({"broken_mask_polarity_inverted", p, 0});
  }
  {
    Problem p = random(2, 2, 2, 3, 2, 36);
    cases.push_back({"broken_key_padding_on_queries", p, 0});
    p.key_valid = {1, 1, 1, 1};
    cases.push_back({"broken_key_padding_on_queries", p, 0});
  }
  // One K/V head, or one per query head: h % kv_heads = h / group.
  cases.push_back({"broken_wrong_kv_head", random(2, 3, 1, 2, 3, 37), 0});
  cases.push_back({"broken_wrong_kv_head", random(2, 3, 3, 2, 3, 38), 0});
  // The first block of 2 holds the row max: no rescale is ever needed.
  cases.push_back({"broken_online_no_rescale",
                   one_query_keys(1, {1, 0, 0.5, -1, 0.25}, {1, 2, 3, 4, 5}),
                   0});
  // tk a multiple of 4: no tail; the rescales round differently.
  cases.push_back(
      {"broken_online_drops_tail_block", random(1, 2, 2, 3, 8, 39), 1e-14});
  {
    // A fully masked block after an allowed key is harmless.
    Problem p = random(1, 1, 1, 3, 4, 40);
    p.key_valid = {1, 1, 0, 0};
    cases.push_back({"broken_online_masked_block_nan", p, 0});
    // So is a masked first key with an allowed one beside it.
    p.key_valid = {0, 1, 1, 1};
    cases.push_back({"broken_online_masked_block_nan", p, 1e-14});
  }
  {
    // No left edge: only the right one, which is right.
    Problem p = random(1, 1, 1, 3, 5, 41);
    p.align = Align::bottom_right;
    p.window_right = 0;
    cases.push_back({"broken_window_off_by_one", p, 0});
  }
  cases.push_back({"broken_strides_ignored", random(2, 2, 1, 3, 4, 42), 0});
  cases.push_back(
      {"broken_nondeterministic_sum", random(1, 2, 1, 3, 5, 43), 1e-15});
  {
    // One batch entry, or batches whose rows share their maxima.
    cases.push_back({"broken_batch_head_leak", random(1, 3, 1, 2, 3, 44), 0});
    Problem p = random(2, 2, 1, 2, 3, 45);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t d = 0; d < 2; ++d)
          p.q.at(1, h, i, d) = p.q.at(0, h, i, d);
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t d = 0; d < 2; ++d) p.k.at(1, 0, j, d) = p.k.at(0, 0, j, d);
    cases.push_back({"broken_batch_head_leak", p, 0});
  }
  // No masked key: nothing to zero after the softmax.
  cases.push_back(
      {"broken_mask_after_softmax", random(2, 2, 1, 3, 4, 46), 0});
  // Scores |s| <= 2 * 2 * 2 / sqrt(2), far inside the clamp.
  cases.push_back({"broken_score_clamp", random(2, 2, 2, 3, 4, 47), 0});
  {
    // No value row is all zero.
    Problem p = random(2, 2, 1, 3, 4, 48);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < 4; ++j) p.v.at(b, 0, j, 0) = 1 + 0.125 * j;
    cases.push_back({"broken_zero_values_as_padding", p, 0});
    // Nonnegative outputs: the ReLU changes nothing.
    for (double& v : p.v.data) v = std::fabs(v);
    cases.push_back({"broken_fused_relu", p, 0});
  }
  // Unit keys (dk = 1, entries +-1) are their own normalisation.
  cases.push_back({"broken_key_l2_normalised",
                   one_query_keys(0.5, {1, -1, 1}, {1, 2, 3}), 0});
  // Rows of 16 keys fit the tile.
  cases.push_back({"broken_fixed_key_tile", random(2, 2, 1, 5, 16, 49), 0});
  return cases;
}

TEST(Broken, EachBugIsInvisibleOutsideItsTrigger) {
  for (const auto& c : invisible_cases()) {
    ASSERT_NO_THROW(c.problem.validate()) << c.name;
    ASSERT_FALSE(c.problem.has_empty_rows()) << c.name;
    const ForwardResult got = impl(c.name)->forward(c.problem);
    const ForwardResult want = impl("loop_f64")->forward(c.problem);
    ASSERT_EQ(got.status, Status::ok) << c.name << ": " << got.error;
    if (c.tol == 0) {
      EXPECT_TRUE(same_result(got, want)) << c.name;
    } else {
      expect_near_all(got.out, want.out, c.tol, c.name + " out");
      expect_near_all(got.weights, want.weights, c.tol, c.name + " weights");
      expect_near_all(got.lse, want.lse, c.tol, c.name + " lse");
    }
  }
}

TEST(Broken, MaskBugsArePureOnUnmaskedProblems) {
  // Without masked keys or empty rows these agree bitwise with loop_f64, so
  // only the property made for them can see them.
  Problem p = Problem::zeros(DType::f64, 1, 2, 1, 2, 3, 2, 2);
  fill_all(p, 13);
  const ForwardResult want = impl("loop_f64")->forward(p);
  for (const std::string name :
       {"broken_finite_mask_fill", "broken_max_over_masked",
        "broken_empty_row_nan", "broken_empty_row_uniform"}) {
    const ForwardResult got = impl(name)->forward(p);
    EXPECT_TRUE(same_result(got, want)) << name;
  }
}

}  // namespace
}  // namespace attncheck
