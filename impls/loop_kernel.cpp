#include "loop_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
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
  std::vector<T> q;         // the query's stored values
  T m = 0;                  // max score (and the sink, when there is one)
  T l = 0;                  // sum of exp(s - m) (and exp(sink - m))
  T a_sink = 0;             // the sink's share exp(sink - m) / l
  bool any = false;         // some key is allowed

  Row(int64_t tk, int64_t dk)
      : s(static_cast<size_t>(tk)),
        th(static_cast<size_t>(tk)),
        a(static_cast<size_t>(tk)),
        ok(static_cast<size_t>(tk)),
        q(static_cast<size_t>(dk)) {}
};

// The descales of p (1 without).
Descales descales_of(const Problem& p) { return p.descale.value_or(Descales{}); }

// The factor of q.k on stored values: scale * q_descale * k_descale, formed
// in double and rounded to T once (just the scale without descales).
template <typename T>
T score_factor(const Problem& p) {
  const Descales d = descales_of(p);
  return static_cast<T>(p.scale * d.q * d.k);
}

// Scores t = factor * (q . k) on the stored values, softcap, bias, then a
// stable softmax over the allowed keys and the sink (max subtraction,
// std::exp, division by the sum), all in T. Keys past the sequence's own
// length are never allowed (Problem::allowed).
template <typename T>
void softmax_row(const Problem& p, int64_t b, int64_t h, int64_t i, Row<T>& r) {
  const T factor = score_factor<T>(p);
  const T cap = static_cast<T>(p.softcap);
  const int64_t g = p.kv_head(h);
  for (int64_t d = 0; d < p.dk; ++d)
    r.q[static_cast<size_t>(d)] = static_cast<T>(p.q_at(b, h, i, d));
  const int64_t s3 = p.k.strides[3];
  r.any = false;
  std::fill(r.ok.begin(), r.ok.end(), uint8_t{0});
  const int64_t n = p.seq_tk(b);
  for (int64_t j = 0; j < n; ++j) {
    const auto jj = static_cast<size_t>(j);
    r.ok[jj] = p.allowed(b, h, i, j) ? 1 : 0;
    if (!r.ok[jj]) continue;
    const double* k = p.k.data.data() + p.kv_offset(p.k, b, g, j, 0);
    T dot = 0;
    for (int64_t d = 0; d < p.dk; ++d)
      dot += r.q[static_cast<size_t>(d)] * static_cast<T>(k[d * s3]);
    T t = factor * dot;
    if (p.softcap > 0) {
      r.th[jj] = std::tanh(t / cap);
      t = cap * r.th[jj];
    }
    if (p.bias) t += static_cast<T>(p.bias_at(b, h, i, j));
    r.s[jj] = t;
    r.m = r.any ? std::max(r.m, t) : t;
    r.any = true;
  }
  // SPEC 1.1: the sink joins the normalisation (and the max, which keeps
  // its exp at most 1) but carries no value.
  const bool sink = !p.sink.empty();
  if (!r.any && !sink) return;
  const T sink_h = sink ? static_cast<T>(p.sink[static_cast<size_t>(h)]) : T(0);
  if (sink) r.m = r.any ? std::max(r.m, sink_h) : sink_h;
  const T e_sink = sink ? std::exp(sink_h - r.m) : T(0);
  r.l = e_sink;
  for (int64_t j = 0; j < n; ++j) {
    const auto jj = static_cast<size_t>(j);
    if (!r.ok[jj]) continue;
    r.a[jj] = std::exp(r.s[jj] - r.m);
    r.l += r.a[jj];
  }
  for (int64_t j = 0; j < n; ++j) {
    const auto jj = static_cast<size_t>(j);
    if (r.ok[jj]) r.a[jj] /= r.l;
  }
  r.a_sink = e_sink / r.l;
}

// x in the output format: exact when T is that format's own type, rounded
// otherwise (a float kernel with a bf16 output).
template <typename T>
double to_output(const Problem& p, T x) {
  const auto v = static_cast<double>(x);
  if ((std::is_same_v<T, double> && p.dtype == DType::f64) ||
      (std::is_same_v<T, float> && p.dtype == DType::f32)) {
    return v;
  }
  return round_to(p.dtype, v);
}

// Index of dq element (b, h, i, d): packed like q ([total_q][heads][dk])
// or [b][h][tq][dk].
size_t dq_index(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t d) {
  if (p.packed_q()) {
    return static_cast<size_t>(
        ((p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i) * p.heads + h) * p.dk + d);
  }
  return static_cast<size_t>(((b * p.heads + h) * p.tq + i) * p.dk + d);
}

// Index of row (b, g, j) of dk / dv: packed like k ([total_k][kv_heads])
// or [b][kv_heads][tk]; times the width, plus d, is the element.
size_t key_row_index(const Problem& p, int64_t b, int64_t g, int64_t j) {
  if (p.packed_k()) {
    return static_cast<size_t>((p.packed->cu_seqlens_k[static_cast<size_t>(b)] + j) * p.kv_heads +
                               g);
  }
  return static_cast<size_t>((b * p.kv_heads + g) * p.tk + j);
}

}  // namespace

template <typename T>
ForwardResult loop_forward(const Problem& p, EmptyRowPolicy empty_rows) {
  if (empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) {
      return ForwardResult::failure(*message);
    }
  }
  const auto rows = static_cast<size_t>(p.total_q() * p.heads);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  // SPEC 1.1: packed queries return no weights.
  if (!p.packed_q()) r.weights.assign(rows * static_cast<size_t>(p.tk), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());

  const T v_descale = static_cast<T>(descales_of(p).v);
  Row<T> row(p.tk, p.dk);
  std::vector<T> o(static_cast<size_t>(p.dv));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.seq_tq(b); ++i) {
        softmax_row(p, b, h, i, row);
        if (!row.any) {
          // Only the sink (o = 0, lse = sink_h exactly), or an empty row of
          // the zero policy (out and weights are already 0, lse -inf).
          if (!p.sink.empty()) r.lse[row_index(p, b, h, i)] = p.sink[static_cast<size_t>(h)];
          continue;
        }
        std::fill(o.begin(), o.end(), T(0));
        for (int64_t j = 0; j < p.seq_tk(b); ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!row.ok[jj]) continue;
          if (!r.weights.empty())
            r.weights[weight_index(p, b, h, i, j)] = static_cast<double>(row.a[jj]);
          for (int64_t d = 0; d < p.dv; ++d) {
            o[static_cast<size_t>(d)] += row.a[jj] * static_cast<T>(p.v_at(b, g, j, d));
          }
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          T x = o[static_cast<size_t>(d)];
          if (p.descale) x *= v_descale;
          r.out[out_index(p, b, h, i, d)] = to_output(p, x);
        }
        r.lse[row_index(p, b, h, i)] = static_cast<double>(row.m + std::log(row.l));
      }
    }
  }
  return r;
}

template <typename T>
BackwardResult loop_backward(const Problem& p, EmptyRowPolicy empty_rows) {
  // SPEC 1.1: paged K/V has no backward.
  if (p.paged) return BackwardResult::unsupported();
  const auto rows = static_cast<size_t>(p.total_q() * p.heads);
  if (p.dout.size() != rows * static_cast<size_t>(p.dv)) {
    return BackwardResult::failure("dout has " + std::to_string(p.dout.size()) + " elements, expected " +
                            std::to_string(rows * static_cast<size_t>(p.dv)));
  }
  if (empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) return BackwardResult::failure(*message);
  }
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  const size_t kv_rows =
      static_cast<size_t>(p.kv_heads) *
      static_cast<size_t>(p.packed_k() ? p.packed->cu_seqlens_k.back() : p.batch * p.tk);
  // dK and dV accumulate over every query of every head of a group; the
  // score factor multiplies dQ and dK once at the end (gradients are with
  // respect to the logical values: stored value times descale).
  std::vector<T> dk_acc(kv_rows * dk, T(0)), dv_acc(kv_rows * dv, T(0));
  std::vector<T> dsink(p.sink.size(), T(0));
  BackwardResult r;
  r.dq.assign(rows * dk, 0.0);

  const Descales descale = descales_of(p);
  // dQ = scale dT K, with K = k_descale * stored K; dK likewise with q.
  const T dq_factor = static_cast<T>(p.scale * descale.k);
  const T dk_factor = static_cast<T>(p.scale * descale.q);
  const T v_descale = static_cast<T>(descale.v);
  Row<T> row(p.tk, p.dk);
  std::vector<T> da(static_cast<size_t>(p.tk)), dq(dk), dout(dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.seq_tq(b); ++i) {
        softmax_row(p, b, h, i, row);
        // An empty (or sink-only) row contributes nothing.
        if (!row.any) continue;
        for (size_t d = 0; d < dv; ++d) {
          dout[d] = static_cast<T>(p.dout[out_index(p, b, h, i, static_cast<int64_t>(d))]);
        }
        // dA_j = dO_i . v_j and the row's sum_r a_r dA_r.
        T delta = 0;
        for (int64_t j = 0; j < p.seq_tk(b); ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!row.ok[jj]) continue;
          T x = 0;
          for (size_t d = 0; d < dv; ++d) {
            x += dout[d] * static_cast<T>(p.v_at(b, g, j, static_cast<int64_t>(d)));
          }
          if (p.descale) x *= v_descale;
          da[jj] = x;
          delta += row.a[jj] * x;
        }
        // SPEC 1.1: d sink_h = - sum over rows of a_sink sum_j a_j dA_j.
        if (!dsink.empty()) dsink[static_cast<size_t>(h)] -= row.a_sink * delta;
        std::fill(dq.begin(), dq.end(), T(0));
        for (int64_t j = 0; j < p.seq_tk(b); ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!row.ok[jj]) continue;
          T x = row.a[jj] * (da[jj] - delta);
          // d(c tanh(t / c)) / dt = 1 - tanh^2.
          if (p.softcap > 0) x *= T(1) - row.th[jj] * row.th[jj];
          const size_t kr = key_row_index(p, b, g, j);
          T* dk_row = &dk_acc[kr * dk];
          T* dv_row = &dv_acc[kr * dv];
          for (size_t d = 0; d < dk; ++d) {
            dq[d] += x * static_cast<T>(p.k_at(b, g, j, static_cast<int64_t>(d)));
            dk_row[d] += x * row.q[d];
          }
          for (size_t d = 0; d < dv; ++d) dv_row[d] += row.a[jj] * dout[d];
        }
        for (size_t d = 0; d < dk; ++d) {
          r.dq[dq_index(p, b, h, i, static_cast<int64_t>(d))] = to_output(p, dq_factor * dq[d]);
        }
      }
    }
  }
  r.dk.resize(dk_acc.size());
  for (size_t k = 0; k < dk_acc.size(); ++k) r.dk[k] = to_output(p, dk_factor * dk_acc[k]);
  r.dv.resize(dv_acc.size());
  for (size_t k = 0; k < dv_acc.size(); ++k) r.dv[k] = to_output(p, dv_acc[k]);
  for (T x : dsink) r.dsink.push_back(static_cast<double>(x));
  return r;
}

template ForwardResult loop_forward<double>(const Problem&, EmptyRowPolicy);
template ForwardResult loop_forward<float>(const Problem&, EmptyRowPolicy);
template BackwardResult loop_backward<double>(const Problem&, EmptyRowPolicy);
template BackwardResult loop_backward<float>(const Problem&, EmptyRowPolicy);

}  // namespace attncheck::impls
