#include "attncheck/dtype.h"

#include <cfloat>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>


namespace attncheck {
namespace {

struct Format {
  int precision;      // significand bits, the implicit one included
  int min_exp;        // frexp exponent of the smallest normal (x = m 2^e, m in [.5, 1))
  double max;
  double min_normal;  // 2^(min_exp - 1)
};

Format format(DType d) {
  switch (d) {
    case DType::f64: return {53, -1021, DBL_MAX, DBL_MIN};
    case DType::f32: return {24, -125, FLT_MAX, 0x1p-126};
    // bf16 shares f32's exponent range with 8 significand bits.
    case DType::bf16: return {8, -125, 0x1.fep127, 0x1p-126};
    case DType::f16: return {11, -13, 65504.0, 0x1p-14};
    // Smallest normals 2^-6 and 2^-14, smallest subnormals 2^-9 and 2^-16.
    case DType::e4m3: return {4, -5, 448.0, 0x1p-6};
    case DType::e5m2: return {3, -13, 57344.0, 0x1p-14};
    // A block format's element has no rounding of its own (it depends on
    // the block's scale): callers go through the block codec.
    case DType::q8_0:
    case DType::q4_0:
      throw std::invalid_argument(std::string(dtype_name(d)) +
                                  " is a block format: its elements round per block of 32");
  }
  throw std::invalid_argument("unknown dtype");
}

}  // namespace

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  // Output formats only: --dtype and the fixtures name the output's format.
  for (DType d : kAllDTypes) {
    if (dtype_name(d) == name) return d;
  }
  throw InputError("unknown dtype '" + std::string(name) +
                   "' (expected f64, f32, bf16 or f16)");
}

DType parse_format(std::string_view name) {
  for (DType d : kAllFormats) {
    if (dtype_name(d) == name) return d;
  }
  for (DType d : kBlockFormats) {
    if (dtype_name(d) == name) {
      throw InputError("format '" + std::string(name) +
                       "' is a block format, for K/V only (kv_dtype; SPEC 1.2)");
    }
  }
  throw InputError("unknown format '" + std::string(name) +
                   "' (expected f64, f32, bf16, f16, e4m3 or e5m2)");
}

DType parse_kv_format(std::string_view name) {
  for (DType d : kBlockFormats) {
    if (dtype_name(d) == name) return d;
  }
  for (DType d : kAllFormats) {
    if (dtype_name(d) == name) return d;
  }
  throw InputError("unknown K/V format '" + std::string(name) +
                   "' (expected f64, f32, bf16, f16, e4m3, e5m2, q8_0 or q4_0)");
}

double unit_roundoff(DType d) { return std::ldexp(1.0, -format(d).precision); }

double underflow_unit(DType d, bool flush_to_zero) {
  const Format f = format(d);
  // Smallest normal is 2^(min_exp - 1); the smallest subnormal has
  // precision - 1 fewer bits, and round-to-nearest errs by half of it. Half
  // of f64's smallest subnormal is no double (it would round to 0 and make
  // a bound of exactly zero), so f64 gets the smallest subnormal itself:
  // errors down there are whole multiples of it anyway.
  // Flushing (SPEC 4) covers results below twice the smallest normal, not
  // only subnormals: vectorised exps return 0 for small normals too (one
  // flushed below 1.41 times f32's smallest normal), and a value
  // flushed from below 2^min_exp errs by less than that.
  if (flush_to_zero) return std::ldexp(1.0, f.min_exp);
  return std::max(std::ldexp(1.0, f.min_exp - f.precision - 1),
                  std::numeric_limits<double>::denorm_min());
}

double max_finite(DType d) { return format(d).max; }

double round_to(DType d, double x) {
  if (d == DType::f64) return x;
  const Format f = format(d);
  if (!std::isfinite(x) || x == 0.0) return x;
  double r;
  if (std::fabs(x) >= f.min_normal) {
    // A normal result keeps `precision` of the double's 53 significand
    // bits: add just under half of the dropped part's unit, plus the kept
    // part's last bit (ties to even), and clear the dropped bits; a carry
    // runs into the exponent as it should. The same result as the branch
    // below (test_dtype checks them against each other) at a tenth of the
    // cost: the real-size draws round millions of values.
    const int drop = 53 - f.precision;
    auto bits = std::bit_cast<uint64_t>(x);
    bits += (uint64_t{1} << (drop - 1)) - 1 + ((bits >> drop) & 1);
    bits &= ~((uint64_t{1} << drop) - 1);
    r = std::bit_cast<double>(bits);
  } else {
    int e = 0;
    std::frexp(x, &e);
    const int ulp_exp = std::max(e, f.min_exp) - f.precision;
    // Scaling by a power of two is exact, and nearbyint rounds ties to even.
    r = std::ldexp(std::nearbyint(std::ldexp(x, -ulp_exp)), ulp_exp);
  }
  if (std::fabs(r) > f.max) {
    return d == DType::e4m3 ? std::numeric_limits<double>::quiet_NaN()
                            : std::copysign(INFINITY, x);
  }
  return r;
}

bool representable(DType d, double x) {
  if (is_block_format(d)) format(d);  // throws: representable per block only
  if (std::isinf(x) && d == DType::e4m3) return false;
  return std::isnan(x) || round_to(d, x) == x;
}

}  // namespace attncheck
