// Tests of the core model: the registry, dtypes, the problem's rules and
// size accounting, the comparison object and the tolerances of SPEC 4 on
// inputs known to pass and known to fail.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "attncheck/compare.h"
#include "attncheck/error.h"
#include "attncheck/oracle.h"
#include "attncheck/registry.h"
#include "attncheck/tolerance.h"

namespace attncheck {
namespace {

TEST(Registry, IsNotEmptyAndHoldsTheFiveReferences) {
  const auto impls = registered_impls();
  ASSERT_FALSE(impls.empty()) << "no implementation registered: impls/ was not linked whole";
  for (const char* name : {"loop_f64", "loop_f32", "loop_zero_f64", "batched_f64", "batched_f32"}) {
    const auto impl = find_impl(name);
    ASSERT_NE(impl, nullptr) << name;
    EXPECT_EQ(impl->info().kind, Kind::reference);
  }
}

TEST(Registry, NamesAreValidAndDuplicatesRejected) {
  for (const auto& impl : registered_impls()) EXPECT_TRUE(valid_impl_name(impl->info().name));
  EXPECT_FALSE(valid_impl_name("Loop"));
  EXPECT_FALSE(valid_impl_name(""));
  EXPECT_FALSE(valid_impl_name("a b"));
  EXPECT_THROW(register_impl(find_impl("loop_f64")), std::invalid_argument);
}

TEST(DType, RoundsToNearestEven) {
  EXPECT_EQ(round_to(DType::f32, 1.0 + 0x1p-24), 1.0);  // tie: to even
  EXPECT_EQ(round_to(DType::f32, 1.0 + 0x1.8p-24), 1.0 + 0x1p-23);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 0x1p-8), 1.0);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 0x1.8p-8), 1.0 + 0x1p-7);
  EXPECT_EQ(round_to(DType::f16, 65504.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_to(DType::f16, 65536.0)));
  EXPECT_EQ(round_to(DType::f16, 0x1p-25), 0.0);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(round_to(DType::f16, 0x1.8p-25), 0x1p-24);
  EXPECT_EQ(round_to(DType::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_TRUE(representable(DType::f32, 0.5));
  EXPECT_FALSE(representable(DType::f32, 0.1));
  EXPECT_EQ(unit_roundoff(DType::f64), DBL_EPSILON / 2);
  EXPECT_EQ(unit_roundoff(DType::f32), FLT_EPSILON / 2);
  EXPECT_EQ(max_finite(DType::bf16), 0x1.fep127);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), InputError);
}

TEST(Problem, DefaultScaleIsTheNearestDouble) {
  for (int64_t dk = 1; dk <= 4096; ++dk) {
    const double s = Problem::default_scale(dk);
    // s is nearest iff 1/sqrt(dk) lies between the midpoints to its
    // neighbours, i.e. mid_lo^2 dk <= 1 <= mid_hi^2 dk (in binary128).
    const __float128 lo = (static_cast<__float128>(s) + std::nextafter(s, 0.0)) / 2;
    const __float128 hi = (static_cast<__float128>(s) + std::nextafter(s, 2.0)) / 2;
    EXPECT_LE(lo * lo * dk, 1) << dk;
    EXPECT_GE(hi * hi * dk, 1) << dk;
  }
  EXPECT_EQ(Problem::default_scale(4), 0.5);
}

// Exercise 4: B = 8, H = 8, T = 128, d = 256 -> dk = 32; the score tensor has
// 8 * 8 * 128 * 128 = 1,048,576 elements, 4 MiB in f32.
TEST(Problem, ExerciseFourShapeAccounting) {
  const int64_t d = 256, heads = 8;
  const Problem p = Problem::zeros(DType::f32, 8, heads, heads, 128, 128, d / heads, d / heads);
  EXPECT_EQ(p.dk, 32);
  EXPECT_EQ(p.score_elements(), 1048576);
  EXPECT_EQ(p.score_bytes(DType::f32), 4 * 1024 * 1024);
  EXPECT_EQ(p.score_bytes(DType::f64), 8 * 1024 * 1024);
  EXPECT_EQ(p.q.data.size(), 8u * 8 * 128 * 32);
}

TEST(Problem, AllowedCombinesEveryConstraint) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 4, 1, 1);
  p.causal = true;
  p.align = Align::bottom_right;  // p_i = i + 2
  EXPECT_TRUE(p.allowed(0, 0, 0, 2));
  EXPECT_FALSE(p.allowed(0, 0, 0, 3));
  p.window_left = 1;
  EXPECT_FALSE(p.allowed(0, 0, 1, 1));
  EXPECT_TRUE(p.allowed(0, 0, 1, 2));
  p.key_valid = {1, 1, 0, 1};
  EXPECT_FALSE(p.allowed(0, 0, 0, 2));
  EXPECT_EQ(p.allowed_count(0, 0, 0), 1);
  p.mask = Broadcast<uint8_t>{1, 1, {1, 0, 1, 1, 1, 1, 1, 1}};
  EXPECT_EQ(p.allowed_count(0, 0, 0), 0);
  EXPECT_TRUE(p.has_empty_rows());
}

TEST(Problem, ValidateNamesTheField) {
  Problem p = Problem::zeros(DType::f32, 1, 2, 2, 2, 2, 2, 2);
  p.kv_heads = 3;
  try {
    p.validate();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads"), std::string::npos);
  }
  p.kv_heads = 2;
  p.q.data[0] = 0.1;  // not a float
  EXPECT_THROW(p.validate(), InputError);
}

TEST(Compare, ExactValuesPassAndNaNNeverDoes) {
  Comparison c;
  c.add("lse", {2}, {-INFINITY, 1.0}, {-INFINITY, 1.0}, {0.0, 0.0});
  EXPECT_TRUE(c.ok());
  c.add("out", {1}, {NAN}, {NAN}, {1.0});
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(std::isinf(c.worst.budget_used));
}

TEST(Compare, ReportsWorstFirstWithBudget) {
  Comparison c;
  c.add("out", {1, 1, 1, 3}, {1.0, 2.5, 3.1}, {1.0, 2.0, 3.0}, {0.1, 0.1, 0.1});
  ASSERT_EQ(c.failed, 2);
  EXPECT_EQ(c.worst.index, (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_NEAR(c.worst.budget_used, 5.0, 1e-12);
  EXPECT_NE(c.describe_failures().find("out[0,0,0,1] expected 2 got 2.5"), std::string::npos);
}

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
