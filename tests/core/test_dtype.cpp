// The storage formats: rounding to nearest even.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "attncheck/dtype.h"
#include "attncheck/error.h"

namespace attncheck {
namespace {

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

TEST(DType, UnderflowUnitIsHalfTheSmallestSubnormalOrTwiceTheSmallestNormal) {
  EXPECT_EQ(underflow_unit(DType::f32, false), 0x1p-150);
  EXPECT_EQ(underflow_unit(DType::bf16, false), 0x1p-134);
  EXPECT_EQ(underflow_unit(DType::f16, false), 0x1p-25);
  EXPECT_EQ(underflow_unit(DType::f64, false), 0x1p-1074);  // no half of it exists
  // SPEC 4: a flushing format may drop anything below twice its smallest
  // normal (vectorised exps return 0 for small normals).
  EXPECT_EQ(underflow_unit(DType::f32, true), 0x1p-125);
  EXPECT_EQ(underflow_unit(DType::bf16, true), 0x1p-125);
  EXPECT_EQ(underflow_unit(DType::f16, true), 0x1p-13);
  EXPECT_EQ(underflow_unit(DType::f64, true), 0x1p-1021);
}

TEST(DType, Fp8FormatsAreKnownButNotParsed) {
  EXPECT_EQ(dtype_name(DType::e4m3), "e4m3");
  EXPECT_EQ(dtype_name(DType::e5m2), "e5m2");
  EXPECT_EQ(unit_roundoff(DType::e4m3), 0x1p-4);
  EXPECT_EQ(unit_roundoff(DType::e5m2), 0x1p-3);
  EXPECT_EQ(max_finite(DType::e4m3), 448.0);
  EXPECT_EQ(max_finite(DType::e5m2), 57344.0);
  EXPECT_TRUE(representable(DType::e4m3, 0x1p-9));   // smallest subnormal
  EXPECT_FALSE(representable(DType::e4m3, 0x1p-10));
  EXPECT_TRUE(representable(DType::e5m2, 0x1p-16));
  EXPECT_EQ(round_to(DType::e4m3, 464.0), 448.0);  // tie: to even
  EXPECT_TRUE(std::isnan(round_to(DType::e4m3, 480.0)));  // no infinity
  EXPECT_TRUE(std::isinf(round_to(DType::e5m2, 65536.0)));
  EXPECT_FALSE(representable(DType::e4m3, INFINITY));
  // Input formats only, and not generated yet: --dtype rejects them.
  EXPECT_THROW(parse_dtype("e4m3"), InputError);
  EXPECT_THROW(parse_dtype("e5m2"), InputError);
}

}  // namespace
}  // namespace attncheck
