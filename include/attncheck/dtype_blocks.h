#pragma once
// Block-quantized K/V storage (SPEC 1.2): ggml's q8_0 and q4_0. Inside the
// harness K and V hold doubles, the logical values; a block's bytes come
// from one canonical encoding of 32 such values, so a fixture replays to
// the same bytes, and a value set that no block holds is refused, never
// rounded on the way to a plugin.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "attncheck/dtype.h"

namespace attncheck {

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
