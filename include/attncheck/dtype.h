#pragma once
// Element formats: their names, the unit roundoff each one contributes to a
// tolerance, rounding to them, and their bit patterns; the block-quantized
// K/V formats' codec; and InputError, the exception every reader of user
// input throws. The lowest of the C++ headers: every other one includes it,
// so whichever a user includes brings InputError with it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "attncheck/plugin.h"

namespace attncheck {

/// Bad input: a malformed file, a wrong shape, an unknown name. The message
/// names the file, field or argument. The one exception type for bad user
/// input: the CLI turns it into exit code 2 and one line.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
  /// Block-quantized K/V storage (SPEC 1.2, the block codec below):
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
/// apply (the block codec is at the end of this header).
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

// ---- Block-quantized K/V storage (SPEC 1.2): ggml's q8_0 and q4_0 ----
// Inside the harness K and V hold doubles, the logical values; a block's
// bytes come from one canonical encoding of 32 such values, so a fixture
// replays to the same bytes, and a value set that no block holds is
// refused, never rounded on the way to a plugin.

/// Values per block, along the head dimension (ggml's QK8_0 and QK4_0).
inline constexpr int64_t kBlockValues = 32;

/// Bytes of one block: 34 for q8_0 (f16 scale, 32 int8), 18 for q4_0 (f16
/// scale, 16 bytes of nibbles). Throws std::invalid_argument for an
/// element format.
size_t block_bytes(DType d);

/// The integers a block of d stores: [-128, 127] for q8_0 (int8), [-8, 7]
/// for q4_0 (nibble - 8).
int block_int_min(DType d);
int block_int_max(DType d);

/// The largest magnitude format d holds: max_finite(d) for an element
/// format; for a block format f16's largest finite times the largest
/// integer magnitude (q8_0: 128, with a negative scale; q4_0: 8).
double format_max_value(DType d);

/// One block as its parts: value t is scale * ints[t]. The scale is an
/// f16 value (NaN for a block of NaNs, which strict-mode poisoning writes).
struct Block {
  double scale = 0;
  std::array<int, kBlockValues> ints{};

  /// Value t, exactly (an f16 times a small integer is a double).
  double value(size_t t) const { return scale * ints[t]; }
};

/// The canonical block of 32 values, or nullopt when no block of d holds
/// them exactly. Canonical: all zeros give scale 0 and integers 0; all
/// NaNs give the f16 NaN and integers 0; otherwise the value of largest
/// magnitude gets the integer of largest magnitude that works (q4_0: -8
/// first, the sign ggml's d = max / -8 gives; q8_0: a positive scale
/// first), so blocks ggml's quantizers write keep their own integers.
std::optional<Block> exact_block(DType d, std::span<const double> values);

/// Whether 32 values are exactly one block of d.
bool is_exact_block(DType d, std::span<const double> values);

/// The block's bytes in ggml's layout: the f16 scale (little-endian), then
/// q8_0's 32 int8, or q4_0's 16 bytes with element t < 16 in the low nibble
/// of byte t and element t >= 16 in the high nibble of byte t - 16, each
/// stored as ints[t] + 8. `out` holds block_bytes(d).
void encode_block(DType d, const Block& block, unsigned char* out);

/// The canonical block of 32 values (exact_block) in ggml's layout; throws
/// InputError naming the format when no block holds them.
void encode_values(DType d, std::span<const double> values, unsigned char* out);

/// The block stored in `in` (block_bytes(d) bytes), and its 32 values.
Block decode_block(DType d, const unsigned char* in);

/// The block ggml's reference quantizer (quantize_row_q8_0_ref,
/// quantize_row_q4_0_ref) makes of 32 values, computed as it does in f32:
/// q8_0 d = amax / 127, q = roundf(x / d); q4_0 d = max / -8 with max the
/// value of largest magnitude (so d may be negative), q = min(15,
/// trunc(x / d + 8.5)) - 8. The inputs are first rounded to f32, as ggml
/// receives them. A scale beyond f16's largest finite becomes infinite, as
/// in ggml.
Block round_block(DType d, std::span<const double> values);

/// Rounds a row of values block by block in place (round_block): how a
/// property that derives K or V element by element puts the result back
/// into the format, and how ggml quantizes a row of Q to q8_0. A last
/// partial block (a Q row whose dk is no multiple of 32) is rounded as if
/// padded with zeros, which change no scale. A scale past f16's range gives
/// infinities or NaNs: the caller checks finiteness where it matters.
void round_row_to_blocks(DType d, std::span<double> row);

}  // namespace attncheck
