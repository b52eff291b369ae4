// The comparison object on inputs known to pass and known to fail.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "attncheck/compare.h"

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

}  // namespace
}  // namespace attncheck
