// The tolerances of SPEC 4 on inputs known to pass and known to fail.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <utility>
#include <vector>

#include "judge/compare.h"
#include "attncheck/oracle.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

Problem exercise_one() {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 2, 2, 2);
  p.q.at(0, 0, 0, 0) = p.q.at(0, 0, 1, 1) = 1;
  p.k.at(0, 0, 0, 0) = p.k.at(0, 0, 1, 1) = 1;
  p.v.at(0, 0, 0, 0) = 2;
  p.v.at(0, 0, 1, 1) = 4;
  return p;
}

PrecisionTraits traits(DType d, uint32_t exp_ulps = 1) {
  PrecisionTraits t;
  t.accum = t.p_cast = d;
  t.exp_ulps = exp_ulps;
  return t;
}

TEST(Tolerance, CorrectF64ComputationPassesAndOneUlpPerturbationsAreJudged) {
  const Problem p = exercise_one();
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, traits(DType::f64));
  // A plain double computation of exercise 1 is within the bound.
  const double s = p.scale, e = std::exp(s), l = e + 1;
  const std::vector<double> out = {2 * e / l, 4 / l, 2 / l, 4 * e / l};
  Comparison ok;
  ok.add("out", {1, 1, 2, 2}, out, o.out, t.out);
  EXPECT_TRUE(ok.ok()) << ok.describe_failures();
  EXPECT_LT(ok.max_budget_used, 1);
  // Tolerances are a few ulps of the value, not a loose absolute number.
  for (size_t k = 0; k < o.out.size(); ++k) {
    EXPECT_GT(t.out[k], 2 * DBL_EPSILON / 2 * std::fabs(o.out[k]));
    EXPECT_LT(t.out[k], 64 * DBL_EPSILON * std::fabs(o.out[k]));
  }
  // An error of 1e-12 relative is far outside it.
  std::vector<double> bad = o.out;
  bad[1] *= 1 + 1e-12;
  Comparison fail;
  fail.add("out", {1, 1, 2, 2}, bad, o.out, t.out);
  EXPECT_FALSE(fail.ok());
}

TEST(Tolerance, FollowsThePrecisionTraits) {
  const Problem p = exercise_one();
  const OracleResult o = oracle(p);
  const Tolerances t64 = tolerances(p, o, traits(DType::f64));
  const Tolerances t64_exp4 = tolerances(p, o, traits(DType::f64, 4));
  Problem p32 = p;
  p32.dtype = DType::f32;
  const Tolerances t32 = tolerances(p32, o, traits(DType::f32));
  PrecisionTraits bf16_cast = traits(DType::f32);
  bf16_cast.p_cast = DType::bf16;
  const Tolerances tcast = tolerances(p32, o, bf16_cast);
  for (size_t k = 0; k < o.out.size(); ++k) {
    EXPECT_LT(t64.out[k], t64_exp4.out[k]);
    EXPECT_GT(t32.out[k], 1e6 * t64.out[k]);
    EXPECT_GT(tcast.out[k], 100 * t32.out[k]);
  }
  // An online softmax's rescales widen it.
  PrecisionTraits blocked = traits(DType::f64);
  blocked.key_block = 1;
  EXPECT_GT(tolerances(p, o, blocked).out[0], t64.out[0]);
}

TEST(Tolerance, HugeScoresInLowPrecisionAreIllConditioned) {
  Problem p = exercise_one();
  p.dtype = DType::f32;
  p.q.at(0, 0, 0, 0) = 4096;
  p.k.at(0, 0, 0, 0) = 4096;  // s ~ 1.2e7: f32 logit error ~ 7 > 0.1
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, traits(DType::f32));
  EXPECT_EQ(t.ill_conditioned[0], 1);
  EXPECT_GE(t.ill_conditioned_rows, 1);
  // The same problem is well within the analysis in f64.
  p.dtype = DType::f64;
  EXPECT_EQ(tolerances(p, o, traits(DType::f64)).ill_conditioned_rows, 0);
}

TEST(Tolerance, RowsBeyondFirstOrderByLengthAreThoseTheTolerancesMark) {
  // With zero inputs the values add nothing (sum a_j D_j = 0): a row is
  // ill-conditioned exactly when its length is, so the screen the real-size
  // phase asks before calling (beyond_first_order_by_length) must say
  // "beyond" exactly when tolerances() marks some row. bf16 accumulation:
  // gamma_n > 0.1 from n = 24 (n u / (1 - n u), u = 2^-8); with 1-key
  // blocks and 4-ulp exps eps = 10 (1 + r) u passes 0.1 at r = 2 (3 keys).
  PrecisionTraits gamma_bound = traits(DType::bf16);
  PrecisionTraits eps_bound = traits(DType::bf16, 4);
  eps_bound.key_block = 1;
  int beyond = 0, within = 0;
  for (const PrecisionTraits& t : {gamma_bound, eps_bound})
    for (int64_t tk : {1, 2, 3, 4, 22, 23, 24, 25, 40})
      for (int64_t tq : {1, 3, 30})
        for (int variant = 0; variant < 5; ++variant) {
          Problem p = Problem::zeros(DType::bf16, 2, 2, 1, tq, tk, 3, 2);
          if (variant == 1) p.causal = true;  // top-left: row i has i + 1 keys
          if (variant == 2) {
            p.causal = true;
            p.align = Align::bottom_right;
          }
          if (variant == 3) {  // batch 1 keeps half its keys, batch 0 all but one
            p.key_valid.assign(static_cast<size_t>(2 * tk), 1);
            p.key_valid[static_cast<size_t>(tk - 1)] = 0;
            for (int64_t j = (tk + 1) / 2; j < tk; ++j) p.key_valid[static_cast<size_t>(tk + j)] = 0;
          }
          if (variant == 4) p.sink = {0.0, -1.0};  // n + 1 terms in l
          const bool screened = beyond_first_order_by_length(p, t);
          const int64_t marked = tolerances(p, oracle(p), t).ill_conditioned_rows;
          ASSERT_EQ(screened, marked > 0) << "tk " << tk << " tq " << tq << " variant " << variant
                                          << " key_block " << t.key_block;
          (screened ? beyond : within) += 1;
        }
  EXPECT_GT(beyond, 50);
  EXPECT_GT(within, 50);
  // The boundary, dense: 23 keys within, 24 beyond; a sink counts as one.
  Problem p = Problem::zeros(DType::bf16, 1, 1, 1, 1, 23, 4, 4);
  EXPECT_FALSE(beyond_first_order_by_length(p, gamma_bound));
  p.sink = {0.0};
  EXPECT_TRUE(beyond_first_order_by_length(p, gamma_bound));
  // A wild exp error (a plugin may declare any uint32) is beyond at once:
  // 2e + 2 is taken in double, not wrapped to 2 in 32 bits.
  const Problem one = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 4, 4);
  const PrecisionTraits wild = traits(DType::f32, 0x80000000u);
  EXPECT_TRUE(beyond_first_order_by_length(one, wild));
  EXPECT_EQ(tolerances(one, oracle(one), wild).ill_conditioned_rows, 1);
  // f32 and f64 accumulations are far from it at real sizes.
  const Problem big = Problem::zeros(DType::f32, 1, 1, 1, 1, 20000, 4, 4);
  EXPECT_FALSE(beyond_first_order_by_length(big, traits(DType::f32)));
}

TEST(Tolerance, MaskedWeightsAndEmptyRowsHaveZeroTolerance) {
  Problem p = exercise_one();
  p.mask = Broadcast<uint8_t>{1, 1, {1, 0, 0, 0}};
  p.key_valid.clear();
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, traits(DType::f64));
  EXPECT_EQ(t.weights[1], 0.0);  // disallowed
  EXPECT_EQ(t.out[2], 0.0);      // empty row: exact zeros expected
  EXPECT_EQ(t.lse[1], 0.0);
}

// One query, keys k_j = [x_j] (dk 1), scale 1, values 0 and 1: the output
// is the weight of key 1, so weights and output show the same logit error.
Problem one_query(DType dtype, std::vector<double> keys) {
  Problem p = Problem::zeros(dtype, 1, 1, 1, 1, static_cast<int64_t>(keys.size()), 1, 1);
  p.scale = 1;
  p.q.at(0, 0, 0, 0) = 1;
  for (size_t j = 0; j < keys.size(); ++j) {
    p.k.at(0, 0, static_cast<int64_t>(j), 0) = keys[j];
    p.v.at(0, 0, static_cast<int64_t>(j), 0) = j == 1 ? 1 : 0;
  }
  return p;
}

PrecisionTraits scores_in(DType s_cast) {
  PrecisionTraits t = traits(DType::f32);
  t.s_cast = s_cast;
  return t;
}

TEST(Tolerance, ScoreStorageAddsItsDerivedTerm) {
  // SPEC 4: scores stored in s_cast cost u_s (2 |t_j| + |s_j|) per logit
  // (q k^T and * scale rounded, then the bias addition). lse's bound is
  // 1.25 (sum_j a_j (e^{D_j} - 1) + ...) (tolerance.cpp: e^{D_j} - 1 where
  // SPEC 4 writes D_j), so the difference of the two bounds is 1.25
  // sum_j a_j e^{D0_j} (e^{dD_j} - 1), dD_j = u_s (2 |t_j| + |s_j|) with
  // t = s (no bias), D0_j the f32 logit error (below 1e-6 here: e^{D0_j}
  // is 1 within the 1e-5 asked).
  const Problem p = one_query(DType::f32, {3, -1.5});
  const OracleResult o = oracle(p);
  const Tolerances plain = tolerances(p, o, traits(DType::f32));
  const Tolerances stored = tolerances(p, o, scores_in(DType::bf16));
  double expected = 0;
  for (int j = 0; j < 2; ++j)
    expected += o.weights[j] * std::expm1(0x1p-8 * 3 * std::fabs(o.scores[j]));
  EXPECT_NEAR(stored.lse[0] - plain.lse[0], kSecondOrderFactor * expected, 1e-5 * expected);
  // s_cast equal to the accumulation format is no cast at all.
  EXPECT_EQ(tolerances(p, o, scores_in(DType::f32)).lse[0], plain.lse[0]);
  // With a softcap the errors of t pass through tanh' and are bounded by
  // |s_j - bias_j|: 5 |s - b| + |s|, never the raw |t|.
  Problem capped = p;
  capped.softcap = 1;
  const OracleResult oc = oracle(capped);
  const double base = tolerances(capped, oc, traits(DType::f32)).lse[0];
  expected = 0;
  for (int j = 0; j < 2; ++j)
    expected += oc.weights[j] * std::expm1(0x1p-8 * 6 * std::fabs(oc.scores[j]));
  EXPECT_NEAR(tolerances(capped, oc, scores_in(DType::bf16)).lse[0] - base,
              kSecondOrderFactor * expected, 1e-5 * expected);
}

TEST(Tolerance, ScoresRoundedToBf16PassOnlyWhenDeclared) {
  // q . k = 3.0244140625 (exact in f32) is stored as 3.03125 in bf16; the
  // softmax of the stored scores in double stands for an eager kernel with
  // no other error. Declared s_cast = bf16 it passes; declared as float
  // scores (the lying twin) its 0.0068 logit error is far outside.
  const Problem p = one_query(DType::f32, {3.0244140625, 0});
  const OracleResult o = oracle(p);
  const double s0 = round_to(DType::bf16, 3.0244140625);
  ASSERT_EQ(s0, 3.03125);
  const double l = std::exp(s0) + 1;
  const std::vector<double> weights = {std::exp(s0) / l, 1 / l};
  const std::vector<double> out = {1 / l};
  for (const auto& [t, should_pass] : {std::pair{scores_in(DType::bf16), true},
                                       std::pair{traits(DType::f32), false}}) {
    const Tolerances tol = tolerances(p, o, t);
    ASSERT_EQ(tol.ill_conditioned_rows, 0);
    Comparison c;
    c.add("weights", {1, 1, 1, 2}, weights, o.weights, tol.weights);
    c.add("out", {1, 1, 1, 1}, out, o.out, tol.out);
    EXPECT_EQ(c.ok(), should_pass) << c.describe_failures();
    if (should_pass) {
      EXPECT_LT(c.max_budget_used, 0.5);
    }
  }
}

TEST(Tolerance, StoredScoresThatMayOverflowAreIllConditioned) {
  // f16's largest finite value is 65504: q . k = 256 * 256 rounds to an
  // infinity however small the scale makes the logit (2^-12: s = 16, whose
  // rounding alone would be first-order), while 255 * 256 = 65280 stays
  // finite.
  for (const auto& [key, overflows] : {std::pair{256.0, true}, std::pair{255.0, false}}) {
    Problem p = one_query(DType::f32, {key, 0});
    p.q.at(0, 0, 0, 0) = 256;
    p.scale = 0x1p-12;
    const OracleResult o = oracle(p);
    EXPECT_EQ(tolerances(p, o, scores_in(DType::f16)).ill_conditioned_rows, overflows ? 1 : 0)
        << key;
    EXPECT_EQ(tolerances(p, o, traits(DType::f32)).ill_conditioned_rows, 0) << key;
  }
}

TEST(Tolerance, WeightsBeforeOrAfterThePCastBothPass) {
  // plugin.h: returned weights may be P before or after its p_cast. Scores
  // 0.3 and 0: the exact weights, and the same rounded to bf16 (an error
  // near 2^-9 relative), pass with p_cast = bf16; rounded without the cast
  // declared they do not.
  const Problem p = one_query(DType::f32, {0.3, 0});
  const OracleResult o = oracle(p);
  std::vector<double> after = o.weights;
  for (double& a : after) a = round_to(DType::bf16, a);
  ASSERT_NE(after, o.weights);
  PrecisionTraits cast = traits(DType::f32);
  cast.p_cast = DType::bf16;
  const auto judged = [&](const std::vector<double>& w, const PrecisionTraits& t) {
    Comparison c;
    c.add("weights", {1, 1, 1, 2}, w, o.weights, tolerances(p, o, t).weights);
    return c.ok();
  };
  EXPECT_TRUE(judged(o.weights, cast));
  EXPECT_TRUE(judged(after, cast));
  EXPECT_FALSE(judged(after, traits(DType::f32)));
}

TEST(Tolerance, FlushCoversSmallNormalsOfTheFormatsDeclaredFlushing) {
  // Scores 0 and -87: the second weight is e^-87 / (1 + e^-87) = 1.65e-38,
  // 1.4 times f32's smallest normal (a vectorised exp seen in
  // practice flushed below 1.41 times it). A kernel whose exp returns 0 there gives weight 0
  // and output 0.
  const Problem p = one_query(DType::f32, {0, -87});
  const OracleResult o = oracle(p);
  ASSERT_GT(o.weights[1], 0x1p-126);
  ASSERT_LT(o.weights[1], 0x1p-125);
  const std::vector<double> weights = {1, 0};
  const std::vector<double> out = {0};
  const auto judged = [&](const PrecisionTraits& t) {
    const Tolerances tol = tolerances(p, o, t);
    Comparison c;
    c.add("weights", {1, 1, 1, 2}, weights, o.weights, tol.weights);
    c.add("out", {1, 1, 1, 1}, out, o.out, tol.out);
    return c.ok();
  };
  PrecisionTraits t = traits(DType::f32);
  EXPECT_FALSE(judged(t));  // no flush declared
  t.flush_to_zero = true;   // version 1: every format flushes
  EXPECT_TRUE(judged(t));
  t.flush_to_zero = false;
  t.ftz_formats = kFtzAccum;  // the exp's format
  EXPECT_TRUE(judged(t));
  t.ftz_formats = kFtzOut;  // only the output flushes: the weight may not vanish
  EXPECT_FALSE(judged(t));
  // A weight far above the flush range may not vanish whatever is declared:
  // scores 0 and -80 give 1.8e-35, 1500 times the smallest normal.
  const Problem q = one_query(DType::f32, {0, -80});
  const OracleResult oq = oracle(q);
  t.ftz_formats = kFtzAccum | kFtzPCast | kFtzOut;
  const Tolerances tol = tolerances(q, oq, t);
  EXPECT_GT(std::fabs(0 - oq.weights[1]), tol.weights[1]);
}

}  // namespace
}  // namespace attncheck
