// The baseline of SPEC 2's AsAccurateAsBaseline (judge/plain_baseline.h): the
// plain algorithm in the declared formats, one pass in key order.
//
// Every operation is rounded to the working format W as soon as it is
// done (rw below). For W = f32 a value is held in a double and rounded with
// a cast to float: the double result of one +, -, *, / of two f32 values,
// rounded to f32, is the f32 operation's result (53 >= 2 * 24 + 2 bits:
// double rounding is innocuous for these), and a cast after each operation
// also keeps a compiler from fusing a product into an addition. exp and
// tanh are taken in double and rounded once: a correctly rounded (or
// nearly) function, the best a W kernel can do, as a baseline should.

#include "judge/plain_baseline.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "attncheck/dtype.h"

namespace attncheck {

DType baseline_working_format(const PrecisionTraits& t, DType kv) {
  const std::optional<DType> q = t.q_cast_format(kv);
  const bool all_f64 = (!q || *q == DType::f64) && t.score_format() == DType::f64 &&
                       t.s_cast_format() == DType::f64 && t.softmax_format() == DType::f64 &&
                       t.p_cast == DType::f64 && t.pv_format() == DType::f64;
  return all_f64 ? DType::f64 : DType::f32;
}

namespace {

// A rounding to `to` that is needed only when `to` is coarser than W (a
// format at least as fine as W holds every W value: f64, or f32 when W is
// f32).
struct Cast {
  std::optional<DType> to;
  Cast(std::optional<DType> format, DType w) {
    if (format && unit_roundoff(*format) > unit_roundoff(w)) to = format;
  }
  double operator()(double x) const { return to ? round_to(*to, x) : x; }
};

template <bool kF32>
std::vector<double> baseline_in(const Problem& p, const PrecisionTraits& t) {
  const auto rw = [](double x) {
    if constexpr (kF32) {
      return static_cast<double>(static_cast<float>(x));
    } else {
      return x;
    }
  };
  const DType w = kF32 ? DType::f32 : DType::f64;
  const std::optional<DType> q_format = t.q_cast_format(combo_of(p).kv);
  const Cast s_cast(t.s_cast_format(), w), p_cast(t.p_cast, w);
  const double qd = p.descale ? p.descale->q : 1.0;
  const double kd = p.descale ? p.descale->k : 1.0;
  const double vd = p.descale ? p.descale->v : 1.0;
  const double scale = rw(p.scale);
  const double cap = rw(p.softcap);
  const double inf = std::numeric_limits<double>::infinity();

  std::vector<double> out(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
  std::vector<double> ks, vs;  // the K/V head's logical keys and values in W: [j][d]
  std::vector<double> q(static_cast<size_t>(p.dk)), s(static_cast<size_t>(p.tk));
  std::vector<double> acc(static_cast<size_t>(p.dv));
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      // The logical problem: each input times its descale, in W.
      ks.resize(static_cast<size_t>(p.tk * p.dk));
      vs.resize(static_cast<size_t>(p.tk * p.dv));
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d)
          ks[static_cast<size_t>(j * p.dk + d)] = rw(p.k.at(b, g, j, d) * kd);
        for (int64_t d = 0; d < p.dv; ++d)
          vs[static_cast<size_t>(j * p.dv + d)] = rw(p.v.at(b, g, j, d) * vd);
      }
      for (int64_t h = 0; h < p.heads; ++h) {
        if (p.kv_head(h) != g) continue;
        const bool sink = !p.sink.empty();
        const double z = sink ? rw(p.sink[static_cast<size_t>(h)]) : 0.0;
        for (int64_t i = 0; i < p.tq; ++i) {
          // Q after its descale, rounded as q_cast declares (else to W);
          // Q8_0 as ggml's quantize_row_q8_0_ref does, on the row in f32.
          for (int64_t d = 0; d < p.dk; ++d) {
            const double x = p.q.at(b, h, i, d) * qd;
            q[static_cast<size_t>(d)] =
                q_format == DType::q8_0 ? rw(x) : q_format ? round_to(*q_format, x) : rw(x);
          }
          if (q_format == DType::q8_0) round_row_to_blocks(DType::q8_0, q);
          // The scores of the allowed keys, in key order; then the max.
          keys.clear();
          double m = sink ? z : -inf;
          for (int64_t j = 0; j < p.tk; ++j) {
            if (!p.allowed(b, h, i, j)) continue;
            const double* k = &ks[static_cast<size_t>(j * p.dk)];
            double dot = 0;
            for (int64_t d = 0; d < p.dk; ++d) dot = rw(dot + rw(q[static_cast<size_t>(d)] * k[d]));
            double x = rw(dot * scale);
            if (p.softcap > 0) x = rw(cap * rw(std::tanh(rw(x / cap))));
            x = s_cast(rw(x + p.bias_at(b, h, i, j)));
            s[static_cast<size_t>(j)] = x;
            keys.push_back(j);
            m = std::max(m, x);
          }
          const size_t row = static_cast<size_t>(((b * p.heads + h) * p.tq + i) * p.dv);
          if (keys.empty()) continue;  // empty, or the sink alone: o = 0
          // One pass: the sink first (a key with value 0), then each key's
          // weight into l and its product with v into the accumulator.
          double l = sink ? p_cast(rw(std::exp(rw(z - m)))) : 0.0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j : keys) {
            const double pj = p_cast(rw(std::exp(rw(s[static_cast<size_t>(j)] - m))));
            l = rw(l + pj);
            const double* v = &vs[static_cast<size_t>(j * p.dv)];
            for (int64_t d = 0; d < p.dv; ++d)
              acc[static_cast<size_t>(d)] = rw(acc[static_cast<size_t>(d)] + rw(pj * v[d]));
          }
          for (int64_t d = 0; d < p.dv; ++d)
            out[row + static_cast<size_t>(d)] = round_to(p.dtype, rw(acc[static_cast<size_t>(d)] / l));
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<double> baseline_out(const Problem& p, const PrecisionTraits& t) {
  if (p.varlen()) {
    throw std::invalid_argument("baseline_out: a dense problem only (not packed or paged)");
  }
  return baseline_working_format(t, combo_of(p).kv) == DType::f64 ? baseline_in<false>(p, t)
                                                                  : baseline_in<true>(p, t);
}

}  // namespace attncheck
