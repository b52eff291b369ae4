#pragma once
// A slice's operands converted once: what the kernels that compute on
// contiguous Q, K and V in their own type (local, online, tiled) share.

#include <cstdint>
#include <vector>

#include "attncheck/problem.h"

namespace attncheck::impls {

/// The operands of slice (b, h) converted to T, contiguous and row-major:
/// Q (tq rows of dk), and K (tk x dk) and V (tk x dv) of its K/V head,
/// which the heads sharing that K/V head (GQA) share.
template <typename T>
class SliceOperands {
 public:
  /// Converts Q of (b, h) and, when h reads another K/V head than the last
  /// call's, that head's K and V; returns whether it converted them.
  bool load(const Problem& p, int64_t b, int64_t h) {
    convert(p.q, b, h, p.tq, p.dk, q_);
    const int64_t g = p.kv_head(h);
    if (b == b_ && g == g_) return false;
    b_ = b;
    g_ = g;
    convert(p.k, b, g, p.tk, p.dk, k_);
    convert(p.v, b, g, p.tk, p.dv, v_);
    return true;
  }

  const std::vector<T>& q() const { return q_; }
  const std::vector<T>& k() const { return k_; }
  const std::vector<T>& v() const { return v_; }

 private:
  static void convert(const Tensor& t, int64_t b, int64_t h, int64_t n, int64_t d,
                      std::vector<T>& out) {
    out.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c)
        out[static_cast<size_t>(i * d + c)] = static_cast<T>(t.at(b, h, i, c));
  }

  std::vector<T> q_, k_, v_;
  int64_t b_ = -1, g_ = -1;
};

}  // namespace attncheck::impls
