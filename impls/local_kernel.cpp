#include "local_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "impl_common.h"
#include "slice_operands.h"
#include "kernels_simd.h"

namespace attncheck::impls {

KeyRange window_range(const Problem& p, int64_t i) {
  const int64_t pos = p.position(i);
  KeyRange r{0, p.tk - 1};
  if (p.window_left >= 0) r.first = std::max(r.first, pos - p.window_left);
  if (p.window_right >= 0) r.last = std::min(r.last, pos + p.window_right);
  if (p.causal) r.last = std::min(r.last, pos);
  return r;
}

namespace {

// q . k in T: float through kernels_simd.h (any summation order), double
// sequentially.
template <typename T>
T dot(const T* q, const T* k, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return simd::dot(q, k, n);
  } else {
    T s = 0;
    for (int64_t d = 0; d < n; ++d) s += q[d] * k[d];
    return s;
  }
}

}  // namespace

template <typename T>
ForwardResult local_forward(const Problem& p, EmptyRowPolicy empty_rows, int64_t* scores_computed,
                            bool with_weights) {
  *scores_computed = 0;
  if (empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  }
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  if (with_weights) r.weights.assign(rows * static_cast<size_t>(p.tk), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());

  const T scale = static_cast<T>(p.scale);
  const T cap = static_cast<T>(p.softcap);
  // Row buffers hold one window, never a whole row of tk scores.
  std::vector<T> s, a;
  std::vector<uint8_t> ok;
  std::vector<T> o(static_cast<size_t>(p.dv));
  SliceOperands<T> x;
  const std::vector<T>& q = x.q();
  const std::vector<T>& k = x.k();
  const std::vector<T>& v = x.v();
  int64_t count = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      x.load(p, b, h);
      for (int64_t i = 0; i < p.tq; ++i) {
        const KeyRange range = window_range(p, i);
        if (range.first > range.last) continue;  // empty (zero policy only)
        const auto w = static_cast<size_t>(range.last - range.first + 1);
        s.assign(w, T(0));
        a.assign(w, T(0));
        ok.assign(w, 0);
        T m = -std::numeric_limits<T>::infinity();
        bool any = false;
        const T* qi = q.data() + i * p.dk;
        for (int64_t j = range.first; j <= range.last; ++j) {
          const auto jj = static_cast<size_t>(j - range.first);
          if (!p.key_valid.empty() && !p.key_valid[static_cast<size_t>(b * p.tk + j)]) continue;
          if (p.mask && !p.mask->at(b, h, i, j, p.tq, p.tk)) continue;
          ok[jj] = 1;
          ++count;
          T t = scale * dot(qi, k.data() + j * p.dk, p.dk);
          if (p.softcap > 0) t = cap * std::tanh(t / cap);
          if (p.bias) t += static_cast<T>(p.bias_at(b, h, i, j));
          s[jj] = t;
          m = any ? std::max(m, t) : t;
          any = true;
        }
        if (!any) continue;  // empty (zero policy only): zeros and -inf stay
        T l = 0;
        for (size_t j = 0; j < w; ++j) {
          if (!ok[j]) continue;
          a[j] = std::exp(s[j] - m);
          l += a[j];
        }
        std::fill(o.begin(), o.end(), T(0));
        for (size_t j = 0; j < w; ++j) {
          if (!ok[j]) continue;
          a[j] /= l;
          const int64_t key = range.first + static_cast<int64_t>(j);
          if (with_weights) r.weights[weight_index(p, b, h, i, key)] = static_cast<double>(a[j]);
          const T* vj = v.data() + key * p.dv;
          for (int64_t d = 0; d < p.dv; ++d) o[static_cast<size_t>(d)] += a[j] * vj[d];
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          r.out[out_index(p, b, h, i, d)] = static_cast<double>(o[static_cast<size_t>(d)]);
        }
        r.lse[row_index(p, b, h, i)] = static_cast<double>(m + std::log(l));
      }
    }
  }
  *scores_computed = count;
  return r;
}

template ForwardResult local_forward<double>(const Problem&, EmptyRowPolicy, int64_t*, bool);
template ForwardResult local_forward<float>(const Problem&, EmptyRowPolicy, int64_t*, bool);

}  // namespace attncheck::impls
