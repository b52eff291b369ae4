#include "loop_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "impl_common.h"

namespace attncheck::impls {
namespace {

// One query's softmax in T, shared by the forward and backward passes so
// that both see the same weights.
template <typename T>
struct Row {
  std::vector<T> s;         // scores after softcap and bias
  std::vector<T> th;        // tanh(t / c) with a softcap (its derivative needs it)
  std::vector<T> a;         // weights
  std::vector<uint8_t> ok;  // allowed flags
  T m = 0;                  // max score
  T l = 0;                  // sum of exp(s - m)
  bool any = false;         // some key is allowed

  explicit Row(int64_t tk)
      : s(static_cast<size_t>(tk)),
        th(static_cast<size_t>(tk)),
        a(static_cast<size_t>(tk)),
        ok(static_cast<size_t>(tk)) {}
};

// Scores t = scale * (q . k), softcap, bias, then a stable softmax over the
// allowed keys (max subtraction, std::exp, division by the sum), all in T.
template <typename T>
void softmax_row(const Problem& p, int64_t b, int64_t h, int64_t i, Row<T>& r) {
  const T scale = static_cast<T>(p.scale);
  const T cap = static_cast<T>(p.softcap);
  const int64_t g = p.kv_head(h);
  r.m = -std::numeric_limits<T>::infinity();
  r.any = false;
  for (int64_t j = 0; j < p.tk; ++j) {
    const auto jj = static_cast<size_t>(j);
    r.ok[jj] = p.allowed(b, h, i, j) ? 1 : 0;
    if (!r.ok[jj]) continue;
    T dot = 0;
    for (int64_t d = 0; d < p.dk; ++d) {
      dot += static_cast<T>(p.q.at(b, h, i, d)) * static_cast<T>(p.k.at(b, g, j, d));
    }
    T t = scale * dot;
    if (p.softcap > 0) {
      r.th[jj] = std::tanh(t / cap);
      t = cap * r.th[jj];
    }
    if (p.bias) t += static_cast<T>(p.bias_at(b, h, i, j));
    r.s[jj] = t;
    r.m = r.any ? std::max(r.m, t) : t;
    r.any = true;
  }
  if (!r.any) return;
  r.l = 0;
  for (size_t j = 0; j < r.s.size(); ++j) {
    if (!r.ok[j]) continue;
    r.a[j] = std::exp(r.s[j] - r.m);
    r.l += r.a[j];
  }
  for (size_t j = 0; j < r.s.size(); ++j)
    if (r.ok[j]) r.a[j] /= r.l;
}

}  // namespace

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

  Row<T> row(p.tk);
  std::vector<T> o(static_cast<size_t>(p.dv));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        softmax_row(p, b, h, i, row);
        // Only the zero policy gets here with an empty row; its output and
        // weights are already zero and its lse -inf.
        if (!row.any) continue;
        std::fill(o.begin(), o.end(), T(0));
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!row.ok[jj]) continue;
          r.weights[weight_index(p, b, h, i, j)] = static_cast<double>(row.a[jj]);
          for (int64_t d = 0; d < p.dv; ++d) {
            o[static_cast<size_t>(d)] += row.a[jj] * static_cast<T>(p.v.at(b, g, j, d));
          }
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          r.out[out_index(p, b, h, i, d)] = static_cast<double>(o[static_cast<size_t>(d)]);
        }
        r.lse[row_index(p, b, h, i)] = static_cast<double>(row.m + std::log(row.l));
      }
    }
  }
  return r;
}

template <typename T>
BackwardResult loop_backward(const Problem& p, EmptyRowPolicy empty_rows) {
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  if (p.dout.size() != rows * static_cast<size_t>(p.dv)) {
    return BackwardResult::failure("dout has " + std::to_string(p.dout.size()) + " elements, expected " +
                            std::to_string(rows * static_cast<size_t>(p.dv)));
  }
  if (empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) return BackwardResult::failure(*message);
  }
  const auto tk = static_cast<size_t>(p.tk);
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  const auto kv_rows = static_cast<size_t>(p.batch * p.kv_heads) * tk;
  // dK and dV accumulate over every query of every head of a group; scale
  // multiplies dK once at the end.
  std::vector<T> dk_acc(kv_rows * dk, T(0)), dv_acc(kv_rows * dv, T(0));
  BackwardResult r;
  r.dq.assign(rows * dk, 0.0);

  const T scale = static_cast<T>(p.scale);
  Row<T> row(p.tk);
  std::vector<T> da(tk), dt(tk), dq(dk), dout(dv), q(dk);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const auto kv_base = static_cast<size_t>(b * p.kv_heads + g) * tk;
      for (int64_t i = 0; i < p.tq; ++i) {
        softmax_row(p, b, h, i, row);
        // An empty row (zero policy only) contributes nothing.
        if (!row.any) continue;
        for (size_t d = 0; d < dv; ++d) {
          dout[d] = static_cast<T>(p.dout[out_index(p, b, h, i, static_cast<int64_t>(d))]);
        }
        for (size_t d = 0; d < dk; ++d) {
          q[d] = static_cast<T>(p.q.at(b, h, i, static_cast<int64_t>(d)));
        }
        // dA_j = dO_i . v_j and the row's sum_r a_r dA_r.
        T delta = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!row.ok[jj]) continue;
          T x = 0;
          for (size_t d = 0; d < dv; ++d) {
            x += dout[d] * static_cast<T>(p.v.at(b, g, j, static_cast<int64_t>(d)));
          }
          da[jj] = x;
          delta += row.a[jj] * x;
        }
        std::fill(dq.begin(), dq.end(), T(0));
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!row.ok[jj]) continue;
          T x = row.a[jj] * (da[jj] - delta);
          // d(c tanh(t / c)) / dt = 1 - tanh^2.
          if (p.softcap > 0) x *= T(1) - row.th[jj] * row.th[jj];
          dt[jj] = x;
          T* dk_row = &dk_acc[(kv_base + jj) * dk];
          T* dv_row = &dv_acc[(kv_base + jj) * dv];
          for (size_t d = 0; d < dk; ++d) {
            dq[d] += x * static_cast<T>(p.k.at(b, g, j, static_cast<int64_t>(d)));
            dk_row[d] += x * q[d];
          }
          for (size_t d = 0; d < dv; ++d) dv_row[d] += row.a[jj] * dout[d];
        }
        for (size_t d = 0; d < dk; ++d) {
          r.dq[row_index(p, b, h, i) * dk + d] = static_cast<double>(scale * dq[d]);
        }
      }
    }
  }
  r.dk.resize(dk_acc.size());
  for (size_t k = 0; k < dk_acc.size(); ++k) {
    r.dk[k] = static_cast<double>(scale * dk_acc[k]);
  }
  r.dv.assign(dv_acc.begin(), dv_acc.end());
  return r;
}

template ForwardResult loop_forward<double>(const Problem&, EmptyRowPolicy);
template ForwardResult loop_forward<float>(const Problem&, EmptyRowPolicy);
template BackwardResult loop_backward<double>(const Problem&, EmptyRowPolicy);
template BackwardResult loop_backward<float>(const Problem&, EmptyRowPolicy);

}  // namespace attncheck::impls
