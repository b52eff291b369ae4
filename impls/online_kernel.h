#pragma once
// The online kernel: flash-style single-pass attention over key blocks with
// a running max and sum and rescaled accumulators, and its recompute-based
// backward. No Tq x Tk matrix is ever held: a row keeps one block of scores.

#include <cstdint>
#include <optional>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// How an online kernel runs.
struct OnlineOptions {
  int64_t key_block = 64;  ///< keys per block, >= 1
  /// When set, each P element is rounded to this format before it
  /// multiplies V (the 16-bit kernels' cast); the running sum keeps P
  /// unrounded.
  std::optional<DType> p_cast;
  EmptyRowPolicy empty_rows = EmptyRowPolicy::error;
};

/// Per query, in T, keys in blocks of o.key_block positions: the block's
/// scores (scale * (q . k), softcap, bias) at its allowed keys; a block
/// without one is skipped, so exp(-inf - -inf) never happens; when the
/// block's max exceeds the running max m, the running sum l and the
/// accumulator are multiplied by exp(m - m_new) (std::exp) once; then
/// p_j = exp(s_j - m), l += p_j, acc += cast(p_j) v_j. Finally out = acc / l
/// rounded to p.dtype (exact when T is the dtype's own type) and lse =
/// m + log(l); no weights. Empty rows follow o.empty_rows as loop_forward's
/// do. Runs on tiles of 64 queries x one key block, skipping blocks outside
/// every row's causal and window limits (so a window saves time, though a
/// tile forms some scores outside it: the kernel does not count scores, as
/// a count is a claim of exact locality that WindowLocality holds it to).
/// Instantiated for double (each allowed score a sequential dot product, as
/// before the tiling) and float (kernels_simd.h's packed products and
/// vectorised exp, which stays within the declared 1 ulp).
template <typename T>
ForwardResult online_forward(const Problem& p, const OnlineOptions& o);

extern template ForwardResult online_forward<double>(const Problem&, const OnlineOptions&);
extern template ForwardResult online_forward<float>(const Problem&, const OnlineOptions&);

/// Flash-style backward, in T: per query the forward's row (out_i, lse_i)
/// is recomputed block by block, delta = dO_i . out_i; a second pass over
/// the blocks recomputes p_j = exp(s_j - lse_i), dS_j = p_j (dO_i . v_j -
/// delta) (times 1 - tanh^2 with a softcap), and accumulates dQ_i, and
/// dK_j, dV_j over every query of every head of a GQA group, scale applied
/// to dQ and dK at the end (as flash-attention's backward does). Gradients are rounded to p.dtype. Empty rows follow
/// o.empty_rows; a dout of the wrong size is an error; o.p_cast is ignored
/// (the backward keeps P in T). Instantiated for double and float.
template <typename T>
BackwardResult online_backward(const Problem& p, const OnlineOptions& o);

extern template BackwardResult online_backward<double>(const Problem&, const OnlineOptions&);
extern template BackwardResult online_backward<float>(const Problem&, const OnlineOptions&);

}  // namespace attncheck::impls
