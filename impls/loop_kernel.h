#pragma once
// The loop kernel: SPEC section 1 written out one query at a time, every
// operation in the element type T. It is the simplest correct
// implementation, so the reference implementations of each format share it.

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Per query: scores t = scale * (q . k), softcap, bias, a stable softmax
/// over the allowed keys (max subtraction, std::exp, division by the sum)
/// and the weighted sum of v, all in T (inputs and scale converted to T).
/// Returns out, weights (exactly 0 where disallowed) and lse = m + log(sum).
/// Empty rows follow `empty_rows`: the error names the first empty query;
/// zero gives zero output and weights and lse = -inf. Instantiated for
/// double and float in loop_kernel.cpp.
template <typename T>
ForwardResult loop_forward(const Problem& p, EmptyRowPolicy empty_rows);

extern template ForwardResult loop_forward<double>(const Problem&,
                                                   EmptyRowPolicy);
extern template ForwardResult loop_forward<float>(const Problem&,
                                                  EmptyRowPolicy);

}  // namespace attncheck::impls
