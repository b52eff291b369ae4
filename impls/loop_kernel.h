#pragma once
// The loop kernel: SPEC section 1 written out one query at a time, every
// operation in the element type T, forward and backward. It is the simplest correct
// implementation, so the reference implementations of each format share it.

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Per query: scores t = (scale * q_descale * k_descale, formed in double
/// and rounded to T once) * (q . k) on the stored values, softcap, bias, a
/// stable softmax over the allowed keys and the sink (SPEC 1.1: the sink
/// joins the max and the sum, never the values), the weighted sum of v
/// times v_descale, all in T; the output rounded to p.dtype when T is
/// wider (float with a bf16 output). Sequences of a packed or paged
/// problem are read through Problem::q_at / k_at / v_at with their own
/// lengths and alignment. Returns out, weights (exactly 0 where disallowed;
/// none with packed queries) and lse = m + log(sum), in the layouts of
/// out_index / weight_index / row_index. Empty rows follow `empty_rows`:
/// the error names the first empty query; zero gives zero output and
/// weights and lse = -inf. With a sink no row is empty: a row without keys
/// gives o = 0 and lse = sink_h. Instantiated for double and float in
/// loop_kernel.cpp.
template <typename T>
ForwardResult loop_forward(const Problem& p, EmptyRowPolicy empty_rows);

extern template ForwardResult loop_forward<double>(const Problem&, EmptyRowPolicy);
extern template ForwardResult loop_forward<float>(const Problem&, EmptyRowPolicy);

/// The gradients of SPEC section 1 for p.dout, per query and in T: the
/// forward's weights recomputed, dA_j = dO_i . v_j, dS_j = a_j (dA_j -
/// sum_r a_r dA_r), times 1 - tanh^2(t_j / c) with a softcap, dQ_i = scale
/// sum_j dT_j k_j; dK and dV accumulate dT_j q_i and a_j dO_i over every
/// query of every head of a GQA group (scale applied to dK once at the
/// end). Empty rows follow `empty_rows` as in loop_forward: the error names
/// the first empty query; zero lets them contribute nothing. With a sink,
/// dsink[h] = - sum over h's rows of a_sink sum_j a_j dA_j (SPEC 1.1).
/// Gradients are of the logical values (stored value times descale); dq
/// is packed like q and dk / dv like k. Paged problems are unsupported
/// (SPEC 1.1: no paged backward). A dout of the wrong size is an error.
/// Instantiated for double and float.
template <typename T>
BackwardResult loop_backward(const Problem& p, EmptyRowPolicy empty_rows);

extern template BackwardResult loop_backward<double>(const Problem&, EmptyRowPolicy);
extern template BackwardResult loop_backward<float>(const Problem&, EmptyRowPolicy);

}  // namespace attncheck::impls
