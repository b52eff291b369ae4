// The comparison object on inputs known to pass and known to fail.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "judge/compare.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

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

TEST(Compare, PairwiseToleranceIsTheSumOfBoth) {
  EXPECT_EQ(pairwise_tolerance(0.25, 0.5), 0.75);
  EXPECT_EQ(pairwise_tolerance(std::vector<double>{1, 2}, std::vector<double>{3, 4}),
            (std::vector<double>{4, 6}));
}

TEST(CompareKinds, ShapesAndWhoReturnsThem) {
  const Problem p = Problem::zeros(DType::f64, 2, 4, 2, 3, 5, 6, 7);
  EXPECT_EQ(array_shape(ArrayKind::out, p), (std::vector<int64_t>{2, 4, 3, 7}));
  EXPECT_EQ(array_shape(ArrayKind::weights, p), (std::vector<int64_t>{2, 4, 3, 5}));
  EXPECT_EQ(array_shape(ArrayKind::lse, p), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(array_shape(ArrayKind::dq, p), (std::vector<int64_t>{2, 4, 3, 6}));
  EXPECT_EQ(array_shape(ArrayKind::dk, p), (std::vector<int64_t>{2, 2, 5, 6}));
  EXPECT_EQ(array_shape(ArrayKind::dv, p), (std::vector<int64_t>{2, 2, 5, 7}));
  EXPECT_EQ(array_size(ArrayKind::dv, p), 2 * 2 * 5 * 7);
  ImplInfo info;
  info.features = ATTNCHECK_FEATURE_LSE;
  EXPECT_EQ(returned_kinds(info, kForwardKinds),
            (std::vector<ArrayKind>{ArrayKind::out, ArrayKind::lse}));
  EXPECT_TRUE(returned_kinds(info, kBackwardKinds).empty());
  info.features |= ATTNCHECK_FEATURE_BACKWARD;
  EXPECT_EQ(returned_kinds(info, kBackwardKinds), kBackwardKinds);
}

TEST(CompareKinds, ModesJudgeAsTheyAreNamed) {
  const Problem p = Problem::zeros(DType::f64, 1, 2, 1, 1, 1, 1, 1);  // out: 2 rows of 1
  ForwardResult expected, got;
  expected.out = {1.0, 2.0};
  got.out = {1.3, 2.0};
  Tolerances tol;
  tol.out = {0.2, 0.2};
  Comparison within;
  compare_kinds(within, {ArrayKind::out}, p, expected, got, tol, CompareMode::tolerance);
  EXPECT_FALSE(within.ok());
  EXPECT_EQ(within.worst.array, "out");
  EXPECT_EQ(within.worst.index, (std::vector<int64_t>{0, 0, 0, 0}));
  // Two answers each within 0.2 of the truth are within 0.4 of each other.
  Comparison pairwise;
  compare_array(pairwise, ArrayKind::out, p, expected.out, got.out, tol.out,
                CompareMode::pairwise, "second call");
  EXPECT_TRUE(pairwise.ok());
  EXPECT_EQ(pairwise.worst.array, "out (second call)");
  Comparison bitwise;
  compare_array(bitwise, ArrayKind::out, p, expected.out, got.out, {}, CompareMode::bitwise);
  EXPECT_EQ(bitwise.failed, 1);
  // Only the selected rows: head 1, whose output is unchanged.
  Comparison rows;
  compare_array(rows, ArrayKind::out, p, expected.out, got.out, {}, CompareMode::bitwise, "",
                [](int64_t, int64_t h, int64_t) { return h == 1; });
  EXPECT_TRUE(rows.ok());
  EXPECT_EQ(rows.checked, 1);
  // +0 equals -0, NaN never equals itself.
  Comparison values;
  compare_array(values, ArrayKind::out, p, {0.0, NAN}, {-0.0, NAN}, {}, CompareMode::bitwise);
  EXPECT_EQ(values.failed, 1);
}

}  // namespace
}  // namespace attncheck
