#include "loop_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "impl_common.h"

namespace attncheck::impls {

template <typename T>
ForwardResult loop_forward(const Problem& p, EmptyRowPolicy empty_rows) {
  if (empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) {
      return ForwardResult::failure(*message);
    }
  }
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(rows * static_cast<size_t>(p.tk), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());

  const T scale = static_cast<T>(p.scale);
  const T cap = static_cast<T>(p.softcap);
  const auto tk = static_cast<size_t>(p.tk);
  std::vector<T> s(tk), a(tk), o(static_cast<size_t>(p.dv));
  std::vector<uint8_t> ok(tk);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        bool any = false;
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          ok[jj] = p.allowed(b, h, i, j) ? 1 : 0;
          if (!ok[jj]) continue;
          T dot = 0;
          for (int64_t d = 0; d < p.dk; ++d) {
            dot += static_cast<T>(p.q.at(b, h, i, d)) *
                   static_cast<T>(p.k.at(b, g, j, d));
          }
          T t = scale * dot;
          if (p.softcap > 0) t = cap * std::tanh(t / cap);
          if (p.bias) t += static_cast<T>(p.bias_at(b, h, i, j));
          s[jj] = t;
          m = any ? std::max(m, t) : t;
          any = true;
        }
        // Only the zero policy gets here with an empty row; its output and
        // weights are already zero and its lse -inf.
        if (!any) continue;
        T l = 0;
        for (size_t j = 0; j < tk; ++j) {
          if (!ok[j]) continue;
          a[j] = std::exp(s[j] - m);
          l += a[j];
        }
        std::fill(o.begin(), o.end(), T(0));
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!ok[jj]) continue;
          a[jj] /= l;
          r.weights[weight_index(p, b, h, i, j)] = static_cast<double>(a[jj]);
          for (int64_t d = 0; d < p.dv; ++d) {
            o[static_cast<size_t>(d)] +=
                a[jj] * static_cast<T>(p.v.at(b, g, j, d));
          }
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          r.out[out_index(p, b, h, i, d)] =
              static_cast<double>(o[static_cast<size_t>(d)]);
        }
        r.lse[row_index(p, b, h, i)] = static_cast<double>(m + std::log(l));
      }
    }
  }
  return r;
}

template ForwardResult loop_forward<double>(const Problem&, EmptyRowPolicy);
template ForwardResult loop_forward<float>(const Problem&, EmptyRowPolicy);

}  // namespace attncheck::impls
