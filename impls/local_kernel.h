#pragma once
// The local kernel: sliding-window attention that visits only the keys
// inside each query's window (exercise 10), with a count of the score
// elements it computed, and the Implementation that reports that count.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

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
/// loop kernel's stable softmax and weighted sum over those keys. Weights
/// outside the range are written as zeros, never computed. Returns out,
/// weights and lse; empty rows follow `empty_rows` as in loop_forward.
/// `*scores_computed` receives the number of q . k products formed, summed
/// over batch and heads. Instantiated for double and float.
template <typename T>
ForwardResult local_forward(const Problem& p, EmptyRowPolicy empty_rows, int64_t* scores_computed);

extern template ForwardResult local_forward<double>(const Problem&, EmptyRowPolicy, int64_t*);
extern template ForwardResult local_forward<float>(const Problem&, EmptyRowPolicy, int64_t*);

/// An implementation that counts the score elements of its last forward
/// call (score_elements_computed). The harness calls an implementation from
/// one thread at a time; the atomic keeps a concurrent caller from tearing
/// the count, though with two concurrent callers "last" is whichever
/// finished last.
class CountingImpl : public Implementation {
 public:
  /// Computes a forward pass and the number of score elements it formed.
  using Forward = std::function<ForwardResult(const Problem&, int64_t* scores_computed)>;

  CountingImpl(ImplInfo info, Forward forward)
      : info_(std::move(info)), forward_(std::move(forward)) {}

  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    int64_t n = 0;
    ForwardResult r = forward_(p, &n);
    last_count_.store(n);
    return r;
  }
  std::optional<int64_t> score_elements_computed() const override {
    const int64_t n = last_count_.load();
    if (n < 0) return std::nullopt;
    return n;
  }

 private:
  ImplInfo info_;
  Forward forward_;
  mutable std::atomic<int64_t> last_count_{-1};  // -1: no call yet
};

/// The deliberately broken twin of local_f64 (impls/broken/
/// local_full_matrix.cpp): correct values, but it computes the whole
/// tq x tk score matrix and masks it, and its counter says so. Not in the
/// registry: no property of the catalog observes cost, so
/// tests/test_impls_tiled.cpp catches it through the counter.
std::shared_ptr<const Implementation> broken_local_full_matrix();

}  // namespace attncheck::impls
