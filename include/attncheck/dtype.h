#pragma once
// Element formats: their names, the unit roundoff each one contributes to a
// tolerance, rounding to them, and their bit patterns.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "attncheck/plugin.h"

namespace attncheck {

/// Element format of q, k, v and out (values travel as doubles inside the
/// harness and are always exactly representable in this format). e4m3 and
/// e5m2 (ABI version 2) are input formats only, never an output's:
/// parse_dtype does not accept them, parse_format does (q_dtype, kv_dtype).
enum class DType : uint32_t {
  f64 = ATTNCHECK_F64,
  f32 = ATTNCHECK_F32,
  bf16 = ATTNCHECK_BF16,
  f16 = ATTNCHECK_F16,
  e4m3 = ATTNCHECK_E4M3,  ///< OCP fp8 "FN": 3 mantissa bits, no infinities
  e5m2 = ATTNCHECK_E5M2,  ///< fp8: 2 mantissa bits, IEEE infinities and NaN
  /// Block-quantized K/V storage (SPEC 1.2, attncheck/dtype_blocks.h):
  /// kv_dtype only. An element has no format of its own: 32 consecutive
  /// values along the head dimension share an f16 scale.
  q8_0 = ATTNCHECK_Q8_0,
  q4_0 = ATTNCHECK_Q4_0,
};

/// Every dtype, in the order listings, sessions and reports use.
inline constexpr std::array<DType, 4> kAllDTypes = {DType::f64, DType::f32, DType::bf16,
                                                    DType::f16};

/// Every format, outputs first then the fp8 input formats.
inline constexpr std::array<DType, 6> kAllFormats = {DType::f64,  DType::f32,  DType::bf16,
                                                     DType::f16,  DType::e4m3, DType::e5m2};

/// The block-quantized K/V formats (SPEC 1.2), kv_dtype only.
inline constexpr std::array<DType, 2> kBlockFormats = {DType::q8_0, DType::q4_0};

/// Whether d is a block format (q8_0, q4_0): values are stored 32 to a
/// block, so rounding, unit roundoff and bit patterns of one element do not
/// apply (attncheck/dtype_blocks.h has the block codec).
constexpr bool is_block_format(DType d) { return d == DType::q8_0 || d == DType::q4_0; }

/// Whether d may be an output's format (f64, f32, bf16, f16; not fp8, not
/// a block format).
constexpr bool is_output_format(DType d) {
  return d != DType::e4m3 && d != DType::e5m2 && !is_block_format(d);
}

/// Bit (1u << dtype) of a dtype inside a dtype set.
constexpr uint32_t dtype_bit(DType d) { return 1u << static_cast<uint32_t>(d); }

/// "f64", "f32", "bf16", "f16", "e4m3", "e5m2", "q8_0" or "q4_0".
std::string_view dtype_name(DType d);

/// Parses the name of an output format (f64, f32, bf16 or f16: the fp8
/// formats are rejected until the harness generates them); throws
/// InputError naming the text.
DType parse_dtype(std::string_view name);

/// Parses the name of any element format, fp8 input formats included (f64,
/// f32, bf16, f16, e4m3, e5m2); throws InputError naming the text (a block
/// format's name with the reason: it is a K/V format only).
DType parse_format(std::string_view name);

/// Parses the name of a K/V format: an element format or a block format
/// (q8_0, q4_0); throws InputError naming the text.
DType parse_kv_format(std::string_view name);

/// Unit roundoff u = 2^-p of the format (half an ulp of 1): 2^-53 for f64,
/// 2^-24 for f32, 2^-8 for bf16, 2^-11 for f16, 2^-4 for e4m3, 2^-3 for
/// e5m2. The element functions below (unit_roundoff, underflow_unit,
/// max_finite, round_to, representable) throw std::invalid_argument for a
/// block format: a value's rounding there depends on its block.
double unit_roundoff(DType d);

/// Half the smallest positive subnormal (the absolute underflow error of
/// round-to-nearest; for f64, which cannot express that half, the smallest
/// subnormal), or, when the format flushes, twice the smallest normal: SPEC
/// 4's flush_to_zero covers every result below that (exps that return 0 for
/// small normals included).
double underflow_unit(DType d, bool flush_to_zero);

/// Largest finite value of the format.
double max_finite(DType d);

/// Rounds x to the nearest value of format d (ties to even); the result is
/// returned as a double, exactly. Beyond the largest finite value it is an
/// infinity, or NaN for e4m3, which has none.
double round_to(DType d, double x);

/// True when x is exactly representable in format d.
bool representable(DType d, double x);

// ---- Bit patterns (dtype_codecs.cpp) ----
// Values travel inside the harness as doubles that their format holds, so
// these conversions are exact; a value the format cannot hold is refused,
// never rounded or wrapped into another number.

/// Throws InputError naming the value and the format when d cannot store
/// x: a finite value beyond the largest finite or between two of d's
/// values, or an infinity in e4m3, which has none. NaN always passes.
void check_storable(DType d, double x);

/// The bf16 bit pattern of x: NaN becomes the quiet NaN 0x7fc0, an
/// infinity bf16's. A finite x that bf16 cannot hold exactly (beyond its
/// largest finite, or between two of its values) is refused with an
/// InputError naming the value and the format, never rounded or wrapped.
uint16_t bf16_bits(double x);

/// The value of a bf16 bit pattern, exactly.
double bf16_value(uint16_t bits);

/// The IEEE binary16 bit pattern of x: NaN becomes the quiet NaN 0x7e00,
/// an infinity f16's. A finite x that f16 cannot hold exactly (beyond
/// 65504, or between two of its values) is refused with an InputError
/// naming the value and the format, never rounded or wrapped.
uint16_t f16_bits(double x);

/// The value of an f16 bit pattern, exactly.
double f16_value(uint16_t bits);

/// The bit pattern of x in the fp8 format d (DType::e4m3 or e5m2): NaN
/// becomes the format's NaN, an infinity e5m2's. A value d cannot hold
/// exactly (beyond its largest finite, 448 or 57344, between two of its
/// values, or an infinity in e4m3, which has none) is refused with an
/// InputError naming the value and the format, never rounded or wrapped.
uint8_t fp8_bits(DType d, double x);

/// The value of a bit pattern of the fp8 format d, exactly.
double fp8_value(DType d, uint8_t bits);

}  // namespace attncheck
