// The tolerances of SPEC 4 on inputs known to pass and known to fail.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "attncheck/compare.h"
#include "attncheck/oracle.h"
#include "attncheck/tolerance.h"

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

}  // namespace
}  // namespace attncheck
