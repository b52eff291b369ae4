// The bit patterns of the element formats (attncheck/dtype.h): bf16, f16,
// E4M3 and E5M2 values to their bits and back, exactly. Values travel
// inside the harness as doubles that the format holds; one it does not is
// refused here, never rounded or wrapped into another number.

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "attncheck/dtype.h"

namespace attncheck {

// Refuses a value format d cannot hold: the harness hands a plugin stored
// values exactly, so a value beyond the largest finite or between two of
// the format's values is a harness defect that would otherwise reach the
// plugin as another number (2^24 wrapped to -2^-8 in f16). NaN travels as
// the format's NaN, an infinity as its infinity where it has one.
void check_storable(DType d, double x) {
  if (std::isnan(x) || (std::isinf(x) && d != DType::e4m3) || representable(d, x)) return;
  if (std::isinf(x)) {
    throw InputError(
        fmt::format("value {} cannot be stored in {}, which has no infinity", x, dtype_name(d)));
  }
  if (std::fabs(x) > max_finite(d)) {
    throw InputError(fmt::format("value {} cannot be stored in {}: beyond its largest finite {}", x,
                                 dtype_name(d), max_finite(d)));
  }
  throw InputError(fmt::format("value {} cannot be stored in {} exactly (nearest {})", x,
                               dtype_name(d), round_to(d, x)));
}

uint16_t bf16_bits(double x) {
  if (std::isnan(x)) return 0x7fc0;
  check_storable(DType::bf16, x);
  // bf16 is the upper half of an f32 with the same exponent range, so a
  // bf16 value converts to float exactly and its low 16 bits are zero.
  const auto f = static_cast<float>(x);
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

double bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t f16_bits(double x) {
  if (std::isnan(x)) return 0x7e00;
  check_storable(DType::f16, x);
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a == 0) return sign;
  // Subnormals are m 2^-24 with m < 1024, normals 1.f 2^e with e in
  // [-14, 15]; scaling by powers of two is exact, so both are integers.
  if (a < 0x1p-14) return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  const int e = std::ilogb(a);
  const auto mantissa = static_cast<uint16_t>(std::ldexp(a, 10 - e) - 1024);
  return sign | static_cast<uint16_t>((e + 15) << 10) | mantissa;
}

double f16_value(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

namespace {

// An fp8 format's bit layout: exponent bits and bias, mantissa bits.
struct Fp8 {
  int mantissa_bits, bias;
  uint8_t nan;
  bool has_infinity;
};
constexpr Fp8 kE4M3{3, 7, 0x7f, false};
constexpr Fp8 kE5M2{2, 15, 0x7e, true};

}  // namespace

uint8_t fp8_bits(DType d, double x) {
  const Fp8 f = d == DType::e4m3 ? kE4M3 : kE5M2;
  if (std::isnan(x)) return f.nan;
  check_storable(d, x);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7c;  // e5m2's: check_storable refused e4m3's
  if (a == 0) return sign;
  // As in f16_bits: subnormals are m 2^(1 - bias - mantissa_bits), normals
  // 1.f 2^e; both scale exactly to integers.
  const int m = f.mantissa_bits;
  if (a < std::ldexp(1.0, 1 - f.bias)) {
    return sign | static_cast<uint8_t>(std::ldexp(a, f.bias - 1 + m));
  }
  const int e = std::ilogb(a);
  const auto mantissa = static_cast<uint8_t>(std::ldexp(a, m - e) - std::ldexp(1.0, m));
  return sign | static_cast<uint8_t>((e + f.bias) << m) | mantissa;
}

double fp8_value(DType d, uint8_t bits) {
  const Fp8 f = d == DType::e4m3 ? kE4M3 : kE5M2;
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int m = f.mantissa_bits;
  const int exponent = (bits & 0x7f) >> m;
  const int mantissa = bits & ((1 << m) - 1);
  if ((bits & 0x7f) == f.nan || (f.has_infinity && exponent == 0x1f && mantissa != 0)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (f.has_infinity && exponent == 0x1f) return sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - f.bias - m);
  return sign * std::ldexp(mantissa + (1 << m), exponent - f.bias - m);
}

}  // namespace attncheck
