// The storage formats: rounding to nearest even, and their bit patterns.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attncheck/dtype.h"
#include "attncheck/implementation.h"

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

// round_to's bit arithmetic for normal results against the definition:
// scale to the unit of the last kept bit, round to an integer (ties to
// even), scale back; then overflow to inf (NaN for e4m3). Random doubles
// over every format's range, its exact ties (a kept value plus half its
// unit), the values next to them, and the values next to the smallest
// normal and the largest finite.
double round_by_scaling(DType d, double x) {
  if (d == DType::f64 || !std::isfinite(x) || x == 0.0) return x;
  const int p = -static_cast<int>(std::log2(unit_roundoff(d)));
  const int min_exp = std::ilogb(underflow_unit(d, true));  // 2^min_exp
  int e = 0;
  std::frexp(x, &e);
  const int ulp_exp = std::max(e, min_exp) - p;
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -ulp_exp)), ulp_exp);
  if (std::fabs(r) > max_finite(d)) {
    return d == DType::e4m3 ? std::numeric_limits<double>::quiet_NaN() : std::copysign(INFINITY, x);
  }
  return r;
}

TEST(DType, RoundingOfNormalResultsAgreesWithScaling) {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  int64_t checked = 0;
  for (DType d : kAllFormats) {
    if (d == DType::f64) continue;
    const double unit = unit_roundoff(d) * 2;  // of the last kept bit, at 1
    const double lo = underflow_unit(d, true) / 2, hi = max_finite(d);
    std::vector<double> xs = {lo, std::nextafter(lo, 0.0), std::nextafter(lo, 1.0), hi,
                              std::nextafter(hi, INFINITY), hi * (1 + unit / 2),
                              std::nextafter(hi * (1 + unit / 2), 0.0)};
    for (int k = 0; k < 200000; ++k) {
      // A kept value at a random exponent over the range and a bit past it.
      const int e = std::ilogb(lo) + static_cast<int>(next() % static_cast<uint64_t>(std::ilogb(hi) - std::ilogb(lo) + 2));
      const double m = 1 + std::ldexp(static_cast<double>(next() % (uint64_t{1} << 20)), -20);
      const double kept = std::ldexp(round_by_scaling(d, m), e);
      const double tie = kept + std::ldexp(unit / 2, e);
      xs.insert(xs.end(), {std::ldexp(m, e), tie, std::nextafter(tie, 0.0), std::nextafter(tie, INFINITY)});
    }
    for (double x : xs)
      for (double s : {x, -x}) {
        ASSERT_TRUE(same(round_to(d, s), round_by_scaling(d, s)))
            << dtype_name(d) << " " << std::hexfloat << s << ": " << round_to(d, s) << " vs "
            << round_by_scaling(d, s);
        ++checked;
      }
  }
  EXPECT_GT(checked, 5000000);
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
  // parse_format (q_dtype, kv_dtype) reads every format.
  for (DType d : kAllFormats) EXPECT_EQ(parse_format(dtype_name(d)), d);
  EXPECT_THROW(parse_format("fp8"), InputError);
}

// The message of parse_dtype_combo(text), or "" when it parses.
std::string combo_error(std::string_view text) {
  try {
    parse_dtype_combo(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(DTypeCombo, SingleNamesAndCombinationsReadAndPrint) {
  for (DType d : kAllDTypes) {
    const DTypeCombo c = parse_dtype_combo(dtype_name(d));
    EXPECT_EQ(c, (DTypeCombo{d, d, d}));
    EXPECT_EQ(combo_name(c), dtype_name(d));
  }
  const DTypeCombo mixed{DType::bf16, DType::e4m3, DType::bf16};
  EXPECT_EQ(parse_dtype_combo("q=bf16,kv=e4m3,out=bf16"), mixed);
  EXPECT_EQ(combo_name(mixed), "q=bf16,kv=e4m3,out=bf16");
  // The parts in any order; the printed spelling is q, kv, out.
  EXPECT_EQ(parse_dtype_combo("out=bf16,kv=e4m3,q=bf16"), mixed);
  // Equal parts print as the single name, which reads back the same.
  EXPECT_EQ(combo_name(parse_dtype_combo("q=f16,kv=f16,out=f16")), "f16");
  const DTypeCombo fp8{DType::e5m2, DType::e4m3, DType::f32};
  EXPECT_EQ(parse_dtype_combo(combo_name(fp8)), fp8);
}

TEST(DTypeCombo, BadSpellingsNameTheText) {
  EXPECT_NE(combo_error("f8").find("unknown dtype 'f8'"), std::string::npos);
  EXPECT_NE(combo_error("e4m3").find("input format only"), std::string::npos);
  EXPECT_NE(combo_error("").find("unknown dtype ''"), std::string::npos);
  const std::pair<const char*, const char*> cases[] = {
      {"q=bf16,kv=e4m3", "part 'out' is missing"},
      {"q=bf16,kv=e4m3,out=bf16,q=f32", "part 'q' appears twice"},
      {"q=bf16,k=e4m3,out=bf16", "unknown part 'k'"},
      {"q=bf16,kv=e4m3,out=e4m3", "out is e4m3, an input format only"},
      {"q=bf8,kv=e4m3,out=bf16", "unknown format 'bf8' for q"},
      {"q=bf16,kv,out=bf16", "part 'kv' has no '='"},
      {"q=bf16,kv=e4m3,out=bf16,", "part '' has no '='"},
      {"q=,kv=e4m3,out=bf16", "unknown format '' for q"},
  };
  for (const auto& [text, why] : cases) {
    const std::string message = combo_error(text);
    EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << text << ": " << message;
  }
}

// ---- bit patterns ----

TEST(DTypeCodecs, EveryBf16PatternRoundTripsExactly) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const double x = bf16_value(bits);
    if (std::isnan(x)) continue;
    ASSERT_TRUE(representable(DType::bf16, x)) << std::hex << b;
    ASSERT_EQ(bf16_bits(x), bits) << std::hex << b;
  }
  EXPECT_EQ(bf16_value(0x3f80), 1.0);
  EXPECT_EQ(bf16_value(0xc040), -3.0);
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(std::nan("")))));
}

TEST(DTypeCodecs, EveryF16PatternRoundTripsExactly) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const double x = f16_value(bits);
    if (std::isnan(x)) continue;
    ASSERT_TRUE(representable(DType::f16, x)) << std::hex << b;
    ASSERT_EQ(f16_bits(x), bits) << std::hex << b;
  }
  EXPECT_EQ(f16_value(0x3c00), 1.0);
  EXPECT_EQ(f16_value(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(f16_value(0x7bff), 65504.0);
  EXPECT_EQ(f16_bits(-0.0), 0x8000);
  EXPECT_TRUE(std::isnan(f16_value(f16_bits(std::nan("")))));
}

TEST(DTypeCodecs, EveryFp8PatternRoundTripsExactly) {
  for (DType d : {DType::e4m3, DType::e5m2}) {
    int finite = 0;
    for (uint32_t b = 0; b < 0x100; ++b) {
      const auto bits = static_cast<uint8_t>(b);
      const double x = fp8_value(d, bits);
      if (std::isnan(x)) continue;
      finite += std::isfinite(x);
      ASSERT_TRUE(representable(d, x)) << dtype_name(d) << std::hex << b;
      ASSERT_EQ(fp8_bits(d, x), bits) << dtype_name(d) << std::hex << b;
    }
    EXPECT_EQ(finite, d == DType::e4m3 ? 254 : 248) << dtype_name(d);
  }
  EXPECT_EQ(fp8_value(DType::e4m3, 0x7e), 448.0);
  EXPECT_EQ(fp8_value(DType::e4m3, 0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(fp8_value(DType::e5m2, 0x7b), 57344.0);
  EXPECT_EQ(fp8_value(DType::e5m2, 0x01), std::ldexp(1.0, -16));
  EXPECT_TRUE(std::isinf(fp8_value(DType::e5m2, 0x7c)));
  // E4M3 has no infinity (SPEC 1.1): refused like any value it cannot hold
  // (ValuesAFormatCannotHoldAreRefusedNotWrapped).
  EXPECT_THROW(fp8_bits(DType::e4m3, std::numeric_limits<double>::infinity()), InputError);
}

// The InputError message of encoding x, or "" when it encodes.
template <typename Encode>
std::string encode_error(Encode encode, double x) {
  try {
    encode(x);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A codec that wrapped what it cannot hold (2^24 became f16's -2^-8, 65536
// its infinity) would hand a harness defect to plugins as other numbers. A
// value beyond the largest finite or between two values of the
// format is refused naming the value and the format; infinities and NaN
// travel as the format's own where it has them.
TEST(DTypeCodecs, ValuesAFormatCannotHoldAreRefusedNotWrapped) {
  const double inf = std::numeric_limits<double>::infinity();
  const auto f16 = [](double x) { return f16_bits(x); };
  const auto bf16 = [](double x) { return bf16_bits(x); };
  const auto e4m3 = [](double x) { return fp8_bits(DType::e4m3, x); };
  const auto e5m2 = [](double x) { return fp8_bits(DType::e5m2, x); };
  EXPECT_EQ(encode_error(f16, 0x1p24),
            "value 16777216 cannot be stored in f16: beyond its largest finite 65504");
  EXPECT_NE(encode_error(f16, 65536).find("beyond its largest finite"), std::string::npos);
  EXPECT_NE(encode_error(f16, -65520).find("value -65520 cannot be stored in f16"),
            std::string::npos);  // rounds to -inf
  EXPECT_EQ(encode_error(f16, 1 + 0x1p-11),
            "value 1.00048828125 cannot be stored in f16 exactly (nearest 1)");
  EXPECT_NE(encode_error(f16, 0x1p-26), "");  // below half the smallest subnormal
  EXPECT_NE(encode_error(bf16, 1 + 0x1p-9).find("cannot be stored in bf16 exactly"),
            std::string::npos);
  EXPECT_NE(encode_error(bf16, 0x1p128).find("bf16: beyond its largest finite"), std::string::npos);
  EXPECT_NE(encode_error(e4m3, 512).find("e4m3: beyond its largest finite 448"), std::string::npos);
  EXPECT_NE(encode_error(e4m3, 464), "");  // rounds to 448 or beyond
  EXPECT_NE(encode_error(e4m3, 0x1p-10), "");
  EXPECT_EQ(encode_error(e4m3, -inf), "value -inf cannot be stored in e4m3, which has no infinity");
  EXPECT_NE(encode_error(e5m2, 65536).find("e5m2: beyond its largest finite 57344"),
            std::string::npos);
  EXPECT_NE(encode_error(e5m2, 1.125).find("e5m2 exactly"), std::string::npos);
  // Infinities and NaN where the format has them; representable values as
  // before, the largest finite included.
  EXPECT_EQ(f16_bits(inf), 0x7c00);
  EXPECT_EQ(f16_bits(-inf), 0xfc00);
  EXPECT_EQ(bf16_bits(inf), 0x7f80);
  EXPECT_EQ(bf16_bits(-inf), 0xff80);
  EXPECT_EQ(fp8_bits(DType::e5m2, inf), 0x7c);
  EXPECT_EQ(fp8_bits(DType::e5m2, -inf), 0xfc);
  EXPECT_EQ(fp8_bits(DType::e4m3, std::nan("")), 0x7f);
  EXPECT_EQ(f16_bits(65504), 0x7bff);
  EXPECT_EQ(fp8_bits(DType::e4m3, -448), 0xfe);
  EXPECT_EQ(bf16_bits(max_finite(DType::bf16)), 0x7f7f);
}

}  // namespace
}  // namespace attncheck
