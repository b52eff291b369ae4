#pragma once
// The tiled kernel: attention in float computed as attention kernels run it
// at real sizes. Query tiles of 64 rows against key tiles of 128 keys (the
// last of each partial), an online softmax across the key tiles, and for
// decode (a few queries against a long row) split-K/V: the keys cut into
// chunks of whole key tiles, each chunk's partial (max, sum, output) formed
// on its own and the partials combined at the end, as flash-decoding does.
//
// Its arithmetic, and why kernel_precision(f32, p_cast, 128) declares it:
// - Scores: a packed float GEMM over the query tile x key tile (dk
//   products and sums in float, any order), times the scale rounded to
//   float: SPEC 4's gamma_{dk+2}. A softcap evaluates tanh in double and
//   rounds once (within 0.51 ulp, inside the declared exp_ulps = 1), then
//   one rounding for each of / cap, * cap and + bias.
// - Stabiliser: a row's running maximum is kept as an integer exponent M,
//   log2(e) times the largest score seen (formed in double) rounded down;
//   p_j = exp(s_j - M ln 2), evaluated in double and rounded to float once
//   (kernels_simd.h exp_rebased: within 0.51 ulp, inside exp_ulps = 1), so
//   1 <= p <= 2 at the row's maximum and l >= 1, as with a kernel whose p
//   is 1 there. A head whose V reaches 2^127 / (2 tk) rounds M up instead
//   (p <= 1, l > 1/2), so the accumulator never overflows where a
//   max-subtracting kernel's would not; there, and only there, a rounding
//   of acc below float's normal range is enlarged by up to 2 by the final
//   division, which SPEC 4's n eta_a term does not budget.
// - Rescales are exact. When a key tile raises M, the running sum and the
//   accumulators are multiplied by 2^(M_old - M_new), an exponent shift
//   that rounds nothing (unless the result falls below the normal range,
//   which costs at most half the smallest subnormal, as a product there
//   does). The split combine is the same shift, 2^(M_chunk - M), applied
//   to each chunk's sum and output. SPEC 4 budgets (2e + 2) u for each of
//   the r = ceil(n / 128) - 1 rescales of a row of n allowed keys, and this
//   kernel's rescales add no relative error, so key_block = 128 holds
//   whatever their number. Their number can exceed r: tiles are aligned to
//   key positions, not to allowed keys, so a row whose allowed keys are
//   scattered (a mask, key padding, a window that starts mid-tile) meets
//   more than ceil(n / 128) tiles, and a split adds one rescale per chunk;
//   a kernel whose rescales round (exp(m_old - m_new) in float) would not
//   be covered by that r on such rows.
// - Sums: the row sum l adds the float P of each tile (any order), the
//   output accumulates P V by the float GEMM; masked keys carry p = 0
//   exactly and add nothing. A split sums each chunk, then the chunks: every
//   term passes through fewer than n additions, SPEC 4's gamma_n.
// - P is rounded to o.p_cast before P V when set (bf16: u_p); the row sum
//   keeps P unrounded, as flash-attention's bf16 kernels do.
// - out = acc / l in float, rounded to p.dtype; lse = M ln 2 + log l formed
//   in double and rounded to float.

#include <cstdint>
#include <optional>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Keys per key tile (the declared key_block).
inline constexpr int64_t kTiledKeys = 128;
/// Queries per query tile.
inline constexpr int64_t kTiledQueries = 64;
/// Problems with at most kSplitMaxQueries queries and more than
/// kSplitMinKeys keys take the split-K/V path, in chunks of kSplitChunk
/// keys (whole key tiles) starting at key 0.
inline constexpr int64_t kSplitMaxQueries = 4;
inline constexpr int64_t kSplitMinKeys = 512;
inline constexpr int64_t kSplitChunk = 4 * kTiledKeys;

/// How the tiled kernel runs.
struct TiledOptions {
  /// When set, each P element is rounded to this format before it
  /// multiplies V; the row sum keeps P unrounded.
  std::optional<DType> p_cast;
};

/// Whether tiled_forward takes the split-K/V path on p.
inline bool tiled_splits(const Problem& p) {
  return p.tq <= kSplitMaxQueries && p.tk > kSplitMinKeys;
}

/// Forward pass of p (dtype f32, or bf16 / f16, whose values float holds
/// exactly) as described above: every feature of the online kernels (key
/// padding, causal and window in both alignments, mask, bias, softcap, GQA,
/// strides, any scale), out and lse, no weights. Empty rows are an error
/// (first_empty_row_error). Single-threaded.
ForwardResult tiled_forward(const Problem& p, const TiledOptions& o);

}  // namespace attncheck::impls
