#pragma once
// The local kernel: sliding-window attention that visits only the keys
// inside each query's window (exercise 10), with a count of the score
// elements it computed (reported through impl_common.h's CountingImpl).

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"
#include "impl_common.h"

namespace attncheck::impls {

/// The keys query i may reach through its window and the causal mask:
/// [first, last] with p_i = p.position(i), first = p_i - window_left (0
/// when unbounded), last = min(p_i + window_right, p_i when causal)
/// (tk - 1 when unbounded), clamped to [0, tk - 1]. first > last when the
/// window holds no key.
struct KeyRange {
  int64_t first = 0, last = -1;
};

/// The key range of query i of p.
KeyRange window_range(const Problem& p, int64_t i);

/// Per query, in T: scores only for the allowed keys of window_range(p, i)
/// (key padding and the mask checked before a score is computed), then the
/// loop kernel's stable softmax and weighted sum over those keys. With
/// `with_weights`, weights outside the range are written as zeros, never
/// computed; without, no weights are returned, so nothing of size tq x tk
/// is allocated and time and memory stay linear in tq for a fixed window.
/// Returns out, lse (and weights); empty rows follow `empty_rows` as in
/// loop_forward. `*scores_computed` receives the number of q . k products
/// formed, summed over batch and heads. Q, K and V are converted to T once
/// per slice; float dot products go through kernels_simd.h (any summation
/// order), double ones are sequential. Instantiated for double and float.
template <typename T>
ForwardResult local_forward(const Problem& p, EmptyRowPolicy empty_rows, int64_t* scores_computed,
                            bool with_weights = true);

extern template ForwardResult local_forward<double>(const Problem&, EmptyRowPolicy, int64_t*, bool);
extern template ForwardResult local_forward<float>(const Problem&, EmptyRowPolicy, int64_t*, bool);

/// The deliberately broken twin of local_f64 (impls/broken/
/// local_full_matrix.cpp): correct values, but it computes the whole
/// tq x tk score matrix and masks it, and its counter says so. Not in the
/// registry: no property of the catalog observes cost, so
/// tests/test_impls_tiled.cpp catches it through the counter.
std::shared_ptr<const Implementation> broken_local_full_matrix();

}  // namespace attncheck::impls
