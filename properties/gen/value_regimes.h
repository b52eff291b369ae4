#pragma once
// The value regimes of SPEC section 3 for the small problems' tensors:
// each tensor's values drawn from one regime, a block format's K/V drawn as
// exact blocks, and the formats' tops the regimes reach.

#include <cstdint>
#include <vector>

#include "attncheck/dtype.h"

namespace attncheck::gen::detail {

/// Value regimes of SPEC section 3, simplest first (shrinking goes there).
/// fp8_edges (fp8 formats only): values at the format's ends, the
/// largest finite values the tensor's limit allows and the subnormals
/// (E4M3: 448 and 2^-9).
enum class Regime { small_int, dyadic, normal, large, huge, one_hot, all_equal, near_tied, fp8_edges };

/// "small_int", "dyadic", ...: the name Coverage counts it by ("regime X").
const char* regime_name(Regime r);

/// The largest value a tensor of format `d` may hold within its limit
/// 3 * 2^limit_exponent (draw_dense's safe limits): the top of an fp8
/// format (E4M3's 448, whose binade 256-448 decoders mistake for NaN;
/// E5M2's 57344) where the limit allows.
double format_top(DType d, int limit_exponent);

/// x in `format` at a real size: rounded to an element format; a block
/// format's values are rounded with their block once the tensor is filled
/// (draw_sized's round_kv_to_blocks).
double stored(DType format, double x);

/// Values of one tensor from one regime. `huge_exponent` is the tensor's own
/// safe limit: for q and k the largest power of two that keeps scores within
/// the first-order analysis, for v the largest that keeps sums of tk values
/// finite. `large_exponent` caps the large regime the same way where scores
/// are stored in a coarse format.
std::vector<double> values(int64_t n, DType dtype, int huge_exponent, int large_exponent);

/// Values of a K or V tensor in the block format d (SPEC 1.2): n values, n
/// a multiple of 32 (rows of dk or dv, multiples of 32), each 32 one exact
/// block drawn as a scale and integers, so that shrinking goes to smaller
/// integers and the plain scale. Kinds (one per block): plain (a power of two
/// at or below the tensor's limit, integers anywhere in the format's range),
/// a zero scale, the extreme integers (q8_0's -128 and 127, q4_0's -8 and
/// 7), the largest scale the limit allows (f16's largest finite, 65504,
/// where it allows that much, as for v under an f32 output), and a
/// subnormal f16 scale. q4_0 scales take either sign (ggml's d = max / -8 is
/// negative for a positive max); q8_0's too, which ggml does not write but
/// a block holds. `top` is the tensor's largest magnitude (3 2^huge, as
/// values() uses).
std::vector<double> block_values(int64_t n, DType d, double top);

}  // namespace attncheck::gen::detail
