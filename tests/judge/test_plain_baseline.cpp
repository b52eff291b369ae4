// The baseline of AsAccurateAsBaseline (judge/plain_baseline.h) on small
// problems whose results are worked out here by hand, step by step in the
// format each stage declares: Q's, S's and P's roundings, f32 for the
// rest (f64 when every stage is f64), descales, sinks, softcap, masks and
// the output's rounding.

#include <gtest/gtest.h>

#include <cmath>

#include "judge/plain_baseline.h"

namespace attncheck {
namespace {

// Every stage f32, P not cast.
PrecisionTraits f32_traits() {
  PrecisionTraits t;
  t.accum = DType::f32;
  t.p_cast = DType::f32;
  t.exp_ulps = 1;
  return t;
}

// One query, keys with one dimension: q . k_j = q k_j.
Problem one_query(DType dtype, double q, std::vector<double> k, std::vector<double> v) {
  Problem p = Problem::zeros(dtype, 1, 1, 1, 1, static_cast<int64_t>(k.size()), 1, 1);
  p.scale = 1;
  p.q.at(0, 0, 0, 0) = q;
  for (size_t j = 0; j < k.size(); ++j) {
    p.k.at(0, 0, static_cast<int64_t>(j), 0) = k[j];
    p.v.at(0, 0, static_cast<int64_t>(j), 0) = v[j];
  }
  return p;
}

TEST(Baseline, EqualScoresGiveTheMeanOfTheValues) {
  // p_j = exp(0) = 1, l = 2: (1 + 2) / 2.
  EXPECT_EQ(baseline_out(one_query(DType::f32, 0, {1, 5}, {1, 2}), f32_traits()),
            std::vector<double>{1.5});
}

TEST(Baseline, EveryOperationIsRoundedToF32) {
  // s = [1, 0], m = 1: p = [1, f32(e^-1)], l = f32(1 + p_2), o = f32(1 / l).
  const float p2 = static_cast<float>(std::exp(-1.0));
  const float l = 1.0f + p2;
  const float o = 1.0f / l;
  const std::vector<double> b = baseline_out(one_query(DType::f32, 1, {1, 0}, {1, 0}), f32_traits());
  EXPECT_EQ(b[0], static_cast<double>(o));
  // In double the result differs: the f32 roundings are taken.
  EXPECT_NE(b[0], 1 / (1 + std::exp(-1.0)));
}

TEST(Baseline, F64WhenEveryStageIsF64) {
  PrecisionTraits t;  // accum and p_cast f64
  EXPECT_EQ(baseline_working_format(t, DType::f64), DType::f64);
  const std::vector<double> b = baseline_out(one_query(DType::f64, 1, {1, 0}, {1, 0}), t);
  EXPECT_EQ(b[0], 1 / (1 + std::exp(-1.0)));
  // One stage coarser: f32 for the rest.
  t.pv_accum = DType::f16;
  EXPECT_EQ(baseline_working_format(t, DType::f64), DType::f32);
  t.pv_accum.reset();
  t.q_cast_kv = true;  // Q rounded to the K/V format
  EXPECT_EQ(baseline_working_format(t, DType::f64), DType::f64);
  EXPECT_EQ(baseline_working_format(t, DType::bf16), DType::f32);
}

TEST(Baseline, PIsRoundedToPCast) {
  // s = [0, -1]: p_2 = bf16(e^-1) = 0.3671875 (e^-1 = 1.4715 x 2^-2, 7
  // fraction bits: 1 + 60/128), then o = f32(1 / f32(1 + 0.3671875)).
  PrecisionTraits t = f32_traits();
  t.p_cast = DType::bf16;
  const std::vector<double> b = baseline_out(one_query(DType::f32, 1, {0, -1}, {1, 0}), t);
  EXPECT_EQ(b[0], static_cast<double>(1.0f / 1.3671875f));
}

TEST(Baseline, QIsRoundedAsQCastDeclares) {
  // q = 1 + 2^-12 is 1 in f16 (10 fraction bits): s = [1, 0] instead of
  // [1 + 2^-12, 0].
  const Problem p = one_query(DType::f32, 1 + std::ldexp(1.0, -12), {1, 0}, {1, 0});
  PrecisionTraits t = f32_traits();
  const std::vector<double> unrounded = baseline_out(p, t);
  t.q_cast = DType::f16;
  const std::vector<double> rounded = baseline_out(p, t);
  EXPECT_EQ(rounded, baseline_out(one_query(DType::f32, 1, {1, 0}, {1, 0}), f32_traits()));
  EXPECT_NE(rounded, unrounded);
  // Declared as the K/V format: f32 K/V hold q, nothing is rounded.
  t.q_cast.reset();
  t.q_cast_kv = true;
  EXPECT_EQ(baseline_out(p, t), unrounded);
}

TEST(Baseline, SIsRoundedToSCast) {
  // The same score rounded after the product instead of Q: s_1 = f16(1 +
  // 2^-12) = 1.
  const Problem p = one_query(DType::f32, 1 + std::ldexp(1.0, -12), {1, 0}, {1, 0});
  PrecisionTraits t = f32_traits();
  t.s_cast = DType::f16;
  EXPECT_EQ(baseline_out(p, t),
            baseline_out(one_query(DType::f32, 1, {1, 0}, {1, 0}), f32_traits()));
}

TEST(Baseline, TheAccumulatorIsF32WhateverPvAccumSays) {
  // 4097 equal keys of value 1: an f16 accumulator would stop at 2048; the
  // baseline's f32 sum holds 4097 exactly, and o = 1.
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 4097, 1, 1);
  for (double& x : p.v.data) x = 1;
  PrecisionTraits t = f32_traits();
  t.pv_accum = DType::f16;
  t.accum = DType::f16;
  EXPECT_EQ(baseline_out(p, t), std::vector<double>{1});
}

TEST(Baseline, DescalesGiveTheLogicalProblem) {
  // Stored q = 2 with descale 1/2, k = 1 and 0 with descale 1, v = 4 and 0
  // with descale 1/4: logically s = [1, 0] and v = [1, 0].
  Problem p = one_query(DType::f32, 2, {1, 0}, {4, 0});
  p.descale = Descales{0.5, 1, 0.25};
  EXPECT_EQ(baseline_out(p, f32_traits()),
            baseline_out(one_query(DType::f32, 1, {1, 0}, {1, 0}), f32_traits()));
}

TEST(Baseline, ASinkIsAKeyWithValueZero) {
  // One key of score 0 and a sink of logit 0: l = 1 + 1, o = 3 / 2.
  Problem p = one_query(DType::f32, 0, {1}, {3});
  p.sink = {0};
  EXPECT_EQ(baseline_out(p, f32_traits()), std::vector<double>{1.5});
  // A sink of logit ln 3 (the max): p_sink = 1, p_1 = f32(e^-f32(ln 3)),
  // o = f32(f32(3 p_1) / f32(1 + p_1)).
  p.sink = {std::log(3.0)};
  const float z = static_cast<float>(std::log(3.0));
  const float p1 = static_cast<float>(std::exp(static_cast<double>(0.0f - z)));
  const float o = (3.0f * p1) / (1.0f + p1);
  EXPECT_EQ(baseline_out(p, f32_traits())[0], static_cast<double>(o));
}

TEST(Baseline, SoftcapBiasAndMasks) {
  // Softcap 2 on t = 1: s = f32(2 f32(tanh(f32(1 / 2)))); key 1's score 0
  // plus a bias of 1/4; key 2 padded away.
  Problem p = one_query(DType::f32, 1, {1, 0, 7}, {1, 0, 100});
  p.softcap = 2;
  p.bias = Broadcast<double>{1, 1, {0, 0.25, 0}};
  p.key_valid = {1, 1, 0};
  const float s1 = 2.0f * static_cast<float>(std::tanh(0.5));
  const float s2 = 0.0f + 0.25f;  // the softcap of 0 is 0
  const float p2 = static_cast<float>(std::exp(static_cast<double>(s2 - s1)));
  const float o = 1.0f / (1.0f + p2);
  EXPECT_EQ(baseline_out(p, f32_traits())[0], static_cast<double>(o));
}

TEST(Baseline, TheOutputIsRoundedToItsFormat) {
  // o = 1 / (1 + e^-1) = 0.7310586 in f32, 0.73046875 in bf16 (1.4609375 x 2^-1).
  const std::vector<double> b = baseline_out(one_query(DType::bf16, 1, {1, 0}, {1, 0}), f32_traits());
  EXPECT_EQ(b[0], 0.73046875);
}

TEST(Baseline, EmptyRowsAreZeroAndGqaReadsTheGroupsHead) {
  // Two query heads on one K/V head; batch entry 1 has every key padded.
  Problem p = Problem::zeros(DType::f32, 2, 2, 1, 1, 2, 1, 1);
  p.scale = 1;
  for (int64_t b = 0; b < 2; ++b) {
    p.v.at(b, 0, 0, 0) = 2;
    p.v.at(b, 0, 1, 0) = 4;
  }
  p.key_valid = {1, 1, 0, 0};
  EXPECT_EQ(baseline_out(p, f32_traits()), (std::vector<double>{3, 3, 0, 0}));
}

TEST(Baseline, RefusesVarlenProblems) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 1, 1);
  p.packed = PackedSeqs{{0, 1}, {0, 1}};
  EXPECT_THROW(baseline_out(p, f32_traits()), std::invalid_argument);
}

}  // namespace
}  // namespace attncheck
