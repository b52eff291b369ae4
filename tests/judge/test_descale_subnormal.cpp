// A descaled subnormal output through the harness: a correct f32 implementation (loop_f32,
// which declares ATTNCHECK_FEATURE_DESCALE) on a problem whose exact f32
// output is subnormal and whose v is stored halved with v_descale 2. Its
// products of the stored v underflow in the stored scale and the product
// by v_descale doubles that error; the tolerance built from the stored v
// (rather than the logical one) failed it. The kept fixture
// fixtures/regressions/tolerance-f32-subnormal-output-v-descale.json is
// this problem (also replayed by `attncheck replay`, test regression.*).

#include <gtest/gtest.h>

#include "attncheck/fixture.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

const std::string kFixture = std::string(ATTNCHECK_SOURCE_DIR) +
                             "/fixtures/regressions/tolerance-f32-subnormal-output-v-descale.json";

// Five keys of equal score (q = k = 0: weights 1/5), v = 2^-147 stored as
// 2^-148 with v_descale 2: the exact output is 2^-147.
Problem subnormal_output_problem() {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 5, 1, 1);
  for (double& x : p.v.data) x = 0x1p-148;
  p.descale = Descales{1, 1, 2};
  p.validate();
  return p;
}

Fixture matches_oracle_fixture(const Problem& p) {
  Fixture f;
  f.problem = p;
  f.meta.property = "MatchesOracle";
  f.meta.impl = "loop_f32";
  f.meta.dtype = "f32";
  f.meta.seed = 0;
  return f;
}

TEST(DescaleSubnormal, LoopF32DeclaresDescalesAndRoundsEveryProductToZero) {
  const auto loop = find_impl("loop_f32");
  ASSERT_NE(loop, nullptr);
  ASSERT_TRUE(loop->info().has(ATTNCHECK_FEATURE_DESCALE));
  const ForwardResult r = loop->forward(subnormal_output_problem());
  ASSERT_EQ(r.status, Status::ok) << r.error;
  EXPECT_EQ(r.out[0], 0.0);  // 0.4 of the smallest subnormal, five times, then * 2
}

TEST(DescaleSubnormal, LoopF32MatchesTheOracleOnASubnormalOutput) {
  const auto loop = find_impl("loop_f32");
  ASSERT_NE(loop, nullptr);
  const PropertyOutcome o =
      replay_fixture(matches_oracle_fixture(subnormal_output_problem()), *loop, RunConfig{});
  EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
  EXPECT_LT(o.max_budget_used, 1.0);
}

TEST(DescaleSubnormal, TheKeptFixtureIsThisProblemAndPasses) {
  const Fixture f = load_fixture(kFixture);
  const Problem want = subnormal_output_problem();
  EXPECT_EQ(f.problem.v.data, want.v.data);
  ASSERT_TRUE(f.problem.descale.has_value());
  EXPECT_EQ(f.problem.descale->v, 2.0);
  EXPECT_EQ(f.meta.impl, "loop_f32");
  const PropertyOutcome o = replay_fixture(f, *find_impl("loop_f32"), RunConfig{});
  EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
}

}  // namespace
}  // namespace attncheck
