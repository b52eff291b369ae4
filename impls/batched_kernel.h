#pragma once
// The batched kernel: attention as whole-matrix Eigen products per (b, h),
// the way framework kernels without fusion compute it. It differs from the
// loop kernel in summation order, which is what makes the two a useful pair.

#include <cstdint>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Per (b, h), in T, with K and V of the K/V head p.kv_head(h): S =
/// (Q K^T) * scale as an Eigen product, disallowed scores set to -inf (key
/// padding, causal, both alignments), a row-wise stable softmax (row max,
/// std::exp, row sums, division), O = P V as an Eigen product. Returns out
/// and weights = P, no lse. Empty rows are an error naming the first empty
/// query, checked before computing. Problems outside kBatchedFeatures
/// (mask, bias, window, softcap) are unsupported. `*scores_computed`, when
/// given, receives the score elements formed: B * H * tq * tk, the whole
/// matrix whatever the mask. Instantiated for double and float in
/// batched_kernel.cpp; in float the products are kernels_simd.h's packed
/// ones and exp is its vectorised exp (within 1 ulp, as std::exp).
template <typename T>
ForwardResult batched_forward(const Problem& p, int64_t* scores_computed = nullptr);

extern template ForwardResult batched_forward<double>(const Problem&, int64_t*);
extern template ForwardResult batched_forward<float>(const Problem&, int64_t*);

/// batched_forward<float> for 16-bit inputs and outputs (p.dtype bf16 or
/// f16, whose values float holds exactly): the same products and softmax
/// in float, each element of P rounded to p.dtype before O = P V, and O
/// rounded to p.dtype. The weights returned are P before that rounding.
/// Other dtypes are unsupported. `*scores_computed` as in batched_forward.
ForwardResult batched_forward_16(const Problem& p, int64_t* scores_computed = nullptr);

/// The gradients of SPEC section 1 for p.dout as whole-matrix Eigen
/// products per (b, h), in T: P as in batched_forward, dA = dO V^T,
/// dS = P o (dA - rowsum(P o dA)), dQ = (dS K) * scale, dK = (dS^T Q) *
/// scale, dV = P^T dO, dK and dV summed over the query heads of each K/V
/// head (GQA). Empty rows are an error naming the first empty
/// query; a dout of the wrong size is an error; problems outside
/// kBatchedFeatures are unsupported. Instantiated for double and float.
template <typename T>
BackwardResult batched_backward(const Problem& p);

extern template BackwardResult batched_backward<double>(const Problem&);
extern template BackwardResult batched_backward<float>(const Problem&);

}  // namespace attncheck::impls
