#pragma once
// What the built-in implementations share: their feature sets, the precision
// traits of a one-pass kernel, the empty-row message, and an Implementation
// that wraps a declaration, a forward function and optionally a backward one.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Everything the loop kernels' forward pass computes (all of SPEC section 1
/// except backward, which implementations with a backward add).
inline constexpr Features kLoopFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW |
    ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_BIAS | ATTNCHECK_FEATURE_GQA |
    ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_LSE |
    ATTNCHECK_FEATURE_SOFTCAP | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT |
    ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT | ATTNCHECK_FEATURE_SCALE;

/// The serving-kernel features (SPEC 1.1) the widened loop kernels compute:
/// sinks, packed sequences, paged K/V and descaled (fp8) inputs.
inline constexpr Features kServingFeatures = ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_PACKED |
                                             ATTNCHECK_FEATURE_PAGED_KV | ATTNCHECK_FEATURE_DESCALE;

/// What the Eigen batched kernels compute: key padding and causal masks,
/// grouped-query attention, weights, any scale; nothing that needs
/// per-element score edits.
inline constexpr Features kBatchedFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT |
    ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT | ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_WEIGHTS |
    ATTNCHECK_FEATURE_SCALE;

/// What the online (flash-style) kernels compute: everything the loop
/// kernels do except weights, which a single pass over key blocks never
/// holds for a whole row.
inline constexpr Features kOnlineFeatures = kLoopFeatures & ~ATTNCHECK_FEATURE_WEIGHTS;

/// Traits of a one-pass kernel computing everything in `d` with the C
/// library's exp, which glibc keeps within 1 ulp for exp and expf.
inline PrecisionTraits one_pass_precision(DType d) {
  PrecisionTraits t;
  t.accum = d;
  t.p_cast = d;
  t.exp_ulps = 1;
  t.flush_to_zero = false;
  t.key_block = 0;
  return t;
}

/// Traits of a kernel accumulating in `accum` (the C library's exp, 1 ulp)
/// that rounds P to `p_cast` before P.V and rescales its running sums
/// once per key block of `key_block` keys (0: one pass).
inline PrecisionTraits kernel_precision(DType accum, DType p_cast, int64_t key_block) {
  PrecisionTraits t = one_pass_precision(accum);
  t.p_cast = p_cast;
  t.key_block = key_block;
  return t;
}

/// The error of an `error`-policy implementation for the first query (in
/// b, h, i order) that has no allowed key, or nullopt when there is none.
/// One wording for all of them, so users and tests can rely on
/// "query (b=". With a sink no row is empty (SPEC 1.1: a row without keys
/// gives o = 0 and lse = sink_h under either policy); a varlen problem's
/// sequences are checked with their own lengths.
inline std::optional<std::string> first_empty_row_error(const Problem& p) {
  if (!p.sink.empty()) return std::nullopt;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seq_tq(b); ++i) {
        // Only keys inside the causal and window limits can be allowed, and
        // the first allowed one settles the row: a linear cost in tq, where
        // counting every row's keys would be tq * tk (the bench's long
        // sliding-window runs).
        const KeyBand band = p.key_band(b, i);
        bool any = false;
        for (int64_t j = band.first; j <= band.last && !any; ++j) any = p.allowed(b, h, i, j);
        if (!any) {
          return "query (b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                 ", i=" + std::to_string(i) + ") has no allowed key";
        }
      }
  return std::nullopt;
}

/// An implementation made of a declaration, a forward function and
/// optionally a backward function, so each built-in file is its kernel calls
/// and its ImplInfo.
class FunctionImpl : public Implementation {
 public:
  using Forward = std::function<ForwardResult(const Problem&)>;
  using Backward = std::function<BackwardResult(const Problem&)>;

  /// `forward` (and `backward`, when given; declare
  /// ATTNCHECK_FEATURE_BACKWARD with it) are called with problems inside
  /// `info`'s declaration. Without `backward`, backward() is unsupported.
  FunctionImpl(ImplInfo info, Forward forward, Backward backward = {})
      : info_(std::move(info)), forward_(std::move(forward)), backward_(std::move(backward)) {}

  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override { return forward_(p); }
  BackwardResult backward(const Problem& p) const override {
    return backward_ ? backward_(p) : Implementation::backward(p);
  }

 private:
  ImplInfo info_;
  Forward forward_;
  Backward backward_;
};

/// An implementation that counts the score elements of its last forward
/// call (score_elements_computed; attncheck bench reports them). The
/// harness calls an implementation from one thread at a time; the atomic
/// keeps a concurrent caller from tearing the count, though with two
/// concurrent callers "last" is whichever finished last.
class CountingImpl : public Implementation {
 public:
  /// Computes a forward pass and the number of score elements it formed.
  using Forward = std::function<ForwardResult(const Problem&, int64_t* scores_computed)>;
  using Backward = std::function<BackwardResult(const Problem&)>;

  /// As FunctionImpl: without `backward`, backward() is unsupported.
  CountingImpl(ImplInfo info, Forward forward, Backward backward = {})
      : info_(std::move(info)), forward_(std::move(forward)), backward_(std::move(backward)) {}

  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    int64_t n = 0;
    ForwardResult r = forward_(p, &n);
    last_count_.store(n);
    return r;
  }
  BackwardResult backward(const Problem& p) const override {
    return backward_ ? backward_(p) : Implementation::backward(p);
  }
  std::optional<int64_t> score_elements_computed() const override {
    const int64_t n = last_count_.load();
    if (n < 0) return std::nullopt;
    return n;
  }

 private:
  ImplInfo info_;
  Forward forward_;
  Backward backward_;
  mutable std::atomic<int64_t> last_count_{-1};  // -1: no call yet
};

/// Declaration of a reference implementation of dtype `d`.
inline ImplInfo reference_info(std::string name, DType d, Features features,
                               EmptyRowPolicy empty_rows, std::string description) {
  ImplInfo info;
  info.name = std::move(name);
  info.kind = Kind::reference;
  info.dtypes = dtype_bit(d);
  info.features = features;
  info.empty_rows = empty_rows;
  info.precision = one_pass_precision(d);
  info.description = std::move(description);
  return info;
}

}  // namespace attncheck::impls
