// The problem model: the default scale, size accounting, allowed keys and
// validation messages.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "attncheck/dtype.h"
#include "attncheck/problem.h"

namespace attncheck {
namespace {

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

TEST(Problem, KeyBandsAreTheStructuralLimitsClippedToTheKeys) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 3, 5, 1, 1);
  EXPECT_EQ(p.key_band(1).first, 0);
  EXPECT_EQ(p.key_band(1).last, 4);
  p.causal = true;
  p.align = Align::bottom_right;  // p_i = i + 2
  EXPECT_EQ(p.causal_band(0).last, 2);
  EXPECT_EQ(p.causal_band(2).last, 4);
  p.window_left = 1;
  p.window_right = 0;
  EXPECT_EQ(p.window_band(0).first, 1);
  EXPECT_EQ(p.window_band(0).last, 2);
  EXPECT_EQ(p.key_band(2).size(), 2);
  // Top-left with tq > tk: the window of the last query lies past the keys.
  Problem q = Problem::zeros(DType::f64, 1, 1, 1, 6, 2, 1, 1);
  q.window_left = 1;
  EXPECT_TRUE(q.key_band(5).empty());
  EXPECT_EQ(q.key_band(5).size(), 0);
  EXPECT_FALSE(q.key_band(5).contains(1));
  // The bands are what allowed() applies.
  for (int64_t i = 0; i < p.tq; ++i)
    for (int64_t j = 0; j < p.tk; ++j)
      EXPECT_EQ(p.allowed(0, 0, i, j), p.key_band(i).contains(j)) << i << " " << j;
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

}  // namespace
}  // namespace attncheck
