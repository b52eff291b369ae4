#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "judge/sequences.h"
#include "judge/tolerance.h"

// First-order error analysis of the attention backward pass, per element,
// in the manner of tolerance.cpp (SPEC 4 and section 1's Backward).
//
// Per row (b, h, i) with K/V head g, allowed keys j (n of them), exact
// weights a_j, logits s_j, given dO (an input, exact):
//
//   dA_j = dO . v_j                   delta = sum_r a_r dA_r
//   dS_j = a_j (dA_j - delta)         dT_j = dS_j f_j,  f_j = 1 - y_j^2,
//                                             y_j = (s_j - bias_j) / c
//   dQ_i = sigma sum_j dT_j k_j       dK_j = sigma sum_{h in g, i} dT_hij q_hi
//   dV_j = sum_{h in g, i} a_hij dO_hi
//
// Each stage's error bound is its inputs' error bounds carried through the
// operation plus its own roundings; an absolute bound is kept for each
// stage, because dA_j - delta cancels (its relative error is unbounded), so
// relative bounds would not compose. Notation: u = u_a the accumulation
// roundoff, e the exp/tanh error in ulps, eta_a / eta_o the underflow units
// of the accumulation and output formats (tolerance.cpp), gamma_k =
// k u / (1 - k u).
//
// The weights' error W_j is the forward tolerance of a_j (tolerance.cpp):
// it already covers the logits' errors D_j, the exps, the sum, the
// division, the cast of P (u_p) and the lse route of flash-style passes,
// and it is a bound (its own kSecondOrderFactor included), so the backward
// inherits every one of those without re-deriving them.
//
// The bound of each gradient is the sum of first-order terms times
// kSecondOrderFactor (tolerance.h), for the same reason as the forward's:
// every term is a first-order error times a product of (1 + delta) factors
// of later stages, and while each relative first-order term (the gamma of
// every sum, the weights' relative errors, checked by the forward) stays
// below kFirstOrderLimit the products stay below 1 / (1 - 0.1)^2 = 1.234 <
// 1.25 of their first-order part. The softcap factor is the exception: its
// relative error is unbounded where tanh saturates (f_j -> 0), so its stage
// is bounded without linearising (|dS^ f^ - dS f| <= |dS^ - dS| (f + F) +
// |dS| F, exactly).
//
// The quantities dA_j, delta, dS_j, dT_j the bound needs are computed here in
// double from the problem and the oracle's weights, not asked of the oracle.
// They are coefficients of terms that are already O(u): a relative error of
// 1e-16 in them, or an absolute one of u (|dA_j| + |delta|) where dA_j -
// delta cancels, changes the bound by O(u^2) of the magnitudes, far below
// the O(u) terms (a_j E_j, u a_j |dA_j|) present in the same element.
//
// Version 2 terms (SPEC 1.1, SPEC 4):
//  - Sinks: the weights a_j already include the sink in their denominator
//    (and their tolerances W_j its terms, tolerance.cpp); the sink's value
//    is 0, so dA_sink = 0 and delta, dS_j, dQ, dK, dV keep their form over
//    the real keys. dsink_h = sum over the R_h non-empty rows of head h of
//    dS_sink = -a_sink delta: per row, the sink weight's error W_sink
//    (Tolerances::sink_weight, the weights' formula for the sink's key) times
//    |delta|, a_sink times delta's error, the product's rounding u a_sink
//    |delta| and its underflow eta_a; the sum over R_h rows rounds
//    gamma_{R_h + 1} (R_h - 1 sums, the negation exact, one more for either
//    order of the product) of sum a_sink |delta| and may underflow R_h
//    times; then the output's rounding and underflow. The rows of all
//    batch entries (all sequences of a varlen problem) feed one sum.
//  - Descales: the gradients are of the LOGICAL inputs (the oracle's,
//    oracle.h): logical q, k, v (stored times descale) are used for the
//    magnitudes below; dA_j = vd (dO . v_j) costs one more rounding
//    (gamma_{dv+1}), dQ = sigma kd sum dT k and dK = sigma qd sum dT q two
//    more (the descale's product and its rounding against sigma, in either
//    order): gamma_{n+4}, gamma_{m+4}; each descale the accumulation format
//    cannot represent is rounded to it once more (+1 in its gamma). dV's
//    sum has no descale; it shares dK's gamma_m, which only widens it.
//  - Underflow in stored units (as in tolerance.cpp): a product
//    of stored values that a factor multiplies afterwards errs by eta_a
//    times that factor, and a kernel may apply it before or after (vd to
//    dO . v_j or to what is derived from it; sigma and kd to dQ's sum,
//    sigma and qd to dK's). So the underflow of everything derived from dA
//    (dA's products, delta's, dS's, the softcap stage's, dsink's) is
//    charged eta_a max(1, |vd|), and each of dQ's n products eta_a max(1,
//    sigma) max(1, |kd|) max(1, |vd|) (dK's: qd for kd): the largest any
//    split of the factors gives (the same holds of sigma without
//    descales, which n sigma eta_a missed for code that scales dS first).
//    Every rounding the gammas count after a sum (sigma's product and the
//    descales') may underflow too: one eta_a each.
//  - Varlen: per sequence (sequence_problem), assembled in the oracle's
//    layout (dq packed like q, dk / dv packed like k) by judge/sequences.h
//    as the forward's are; dsink sums over the sequences before its bound
//    is finished.

namespace attncheck {
namespace {

// The oracle rounds each exact gradient to the nearest double once:
// |g - fl(g)| <= 2^-53 |g|, and the comparison is against fl(g).
constexpr double kOracleRounding = 0x1p-53;

// dsink's per-head sums (see the top): carried errors, magnitudes and the
// number of contributing rows, over every batch entry or sequence.
struct SinkSums {
  std::vector<double> err, mag, rows;
  std::vector<uint8_t> ill;  // a row of the head is beyond the analysis
};

// The bound of dsink_h from its sums.
std::vector<double> dsink_tolerances(const SinkSums& s, const OracleResult& o, double u,
                                     double u_out, double eta_a, double eta_o) {
  std::vector<double> tol(s.err.size(), 0.0);
  for (size_t h = 0; h < tol.size(); ++h) {
    const double r = s.rows[h];
    if (s.ill[h]) {
      tol[h] = std::numeric_limits<double>::infinity();  // not judged
      continue;
    }
    tol[h] = kSecondOrderFactor * (s.err[h] + gamma(r + 1, u) * s.mag[h] + r * eta_a +
                                   u_out * std::fabs(o.dsink[h]) + eta_o);
  }
  return tol;
}

}  // namespace

namespace {

// Every non-empty query row of the (b, K/V head g) group: they all feed the
// group's dK and dV, so one unjudgeable sum makes all of them unjudgeable.
void mark_group_ill_conditioned(const Problem& p, const OracleResult& o, int64_t b, int64_t g,
                                GradTolerances& tol) {
  for (int64_t h = 0; h < p.heads; ++h) {
    if (p.kv_head(h) != g) continue;
    for (int64_t i = 0; i < p.tq; ++i) {
      const size_t row = row_index(p, b, h, i);
      if (tol.ill_conditioned[row] || o.row_empty[row]) continue;
      tol.ill_conditioned[row] = 1;
      ++tol.ill_conditioned_rows;
    }
  }
}

}  // namespace

namespace {

// The gradients by stage (SPEC 4.1): a backward pass recomputes the scores
// and the softmax and sums dV, dP, dS, dQ and dK in formats no stage of the
// forward names, so every u below is the coarsest of the declared stages
// (q_cast's too), and a flush of any of them is a flush of that format. A
// declaration without stages keeps accum, its version 1 meaning. Q's
// rounding costs one more relative rounding per product (gamma_dot); below
// the q_cast format's normal range it errs absolutely, which the relative
// terms do not cover: such rows are beyond the declared precision
// (q_cast_underflows).
PrecisionTraits one_format(const PrecisionTraits& t, DType kv) {
  if (!t.has_stages()) return t;
  PrecisionTraits r = t;
  for (const std::optional<DType> f : {std::optional<DType>(t.score_format()),
                                       std::optional<DType>(t.softmax_format()),
                                       std::optional<DType>(t.pv_format()), t.q_cast_format(kv)}) {
    if (f && unit_roundoff(*f) > unit_roundoff(r.accum)) r.accum = *f;
  }
  const bool flushes = t.flushes(kFtzAccum) || t.flushes(kFtzPvAccum);
  r.q_cast.reset();
  r.q_cast_kv = false;
  r.score_accum.reset();
  r.softmax_accum.reset();
  r.pv_accum.reset();
  r.s_cast = t.s_cast_format();
  r.ftz_formats = (t.ftz_formats ? t.ftz_formats : t.flush_to_zero ? kFtzAccum | kFtzPCast | kFtzOut : 0) &
                  ~(kFtzAccum | kFtzPvAccum);
  if (flushes) r.ftz_formats |= kFtzAccum;
  r.flush_to_zero = false;
  return r;
}

// Whether row (b, h, i) of p has a nonzero Q element below the normal
// range of the format Q is rounded to (see one_format).
bool q_cast_underflows(const Problem& p, const std::optional<DType>& q_format, int64_t b,
                       int64_t h, int64_t i) {
  if (!q_format) return false;
  const double qd = p.descale ? p.descale->q : 1.0;
  const double smallest_normal = underflow_unit(*q_format, true) / 2;
  for (int64_t d = 0; d < p.dk; ++d) {
    const double x = std::fabs(p.q.at(b, h, i, d) * qd);
    if (x != 0 && x < smallest_normal) return true;
  }
  return false;
}

// The coefficients of a dense problem's backward analysis that every row
// shares: the one format's roundoff and underflow units, the final
// rounding, sigma, the descales' roundings and underflow in stored units
// (see the top), and the gammas of the raw logit and of dA.
struct BackwardUnits {
  double u = 0, e = 0, eta_a = 0, eta_o = 0, u_out = 0, sigma = 0;
  double qd = 1, kd = 1, vd = 1;
  double extra_da = 0, extra_q = 0, extra_k = 0;
  double eta_da = 0, eta_dq = 0, eta_dk = 0;
  std::optional<DType> q_format;
  double gamma_dot = 0, gamma_dv = 0;
};

// The units of p's backward under `declared`, whose one format is `t`.
BackwardUnits backward_units(const Problem& p, const PrecisionTraits& declared,
                             const PrecisionTraits& t) {
  BackwardUnits s;
  s.u = unit_roundoff(t.accum);
  s.e = t.exp_ulps;
  // Each format's own flush (ftz_formats; flush_to_zero speaks for all
  // when it is 0): twice its smallest normal where it flushes.
  s.eta_a = underflow_unit(t.accum, t.flushes(kFtzAccum));
  s.eta_o = underflow_unit(p.dtype, t.flushes(kFtzOut));
  // Rounding of the final value: the cast to the output format when it is
  // not the accumulation format (the last operation's own rounding is in the
  // gammas below), and the oracle's rounding of the exact value.
  s.u_out = (p.dtype == t.accum ? 0.0 : unit_roundoff(p.dtype)) + kOracleRounding;
  s.sigma = std::fabs(p.scale);
  // Descales (see the top): logical values, and the extra roundings.
  s.qd = p.descale ? p.descale->q : 1.0;
  s.kd = p.descale ? p.descale->k : 1.0;
  s.vd = p.descale ? p.descale->v : 1.0;
  const auto unrepresentable = [&](double x) { return representable(t.accum, x) ? 0.0 : 1.0; };
  s.extra_da = p.descale ? 1 + unrepresentable(s.vd) : 0.0;
  s.extra_q = p.descale ? 2 + unrepresentable(s.kd) : 0.0;
  s.extra_k = p.descale ? 2 + unrepresentable(s.qd) : 0.0;
  // Underflow in stored units (see the top): eta_a scaled by the factors a
  // kernel may apply after the product that underflows.
  s.eta_da = s.eta_a * std::max(1.0, std::fabs(s.vd));
  s.eta_dq = s.eta_da * std::max(1.0, s.sigma) * std::max(1.0, std::fabs(s.kd));
  s.eta_dk = s.eta_da * std::max(1.0, s.sigma) * std::max(1.0, std::fabs(s.qd));
  // The raw logit t_j = sigma (q . k_j): a dot product of dk terms, the
  // rounding of sigma to the accumulation format and the product by it, as
  // in the forward.
  // Q rounded before the product (q_cast, SPEC 4.1): one more relative
  // rounding of each product q_t k_t, within u (one_format made u at
  // least u_qc).
  s.q_format = declared.q_cast_format(combo_of(p).kv);
  s.gamma_dot = gamma(static_cast<double>(p.dk) + 2 + (s.q_format ? 1 : 0), s.u);
  // dA_j = dO . v_j: dv products and dv - 1 sums.
  s.gamma_dv = gamma(static_cast<double>(p.dv) + s.extra_da, s.u);
  return s;
}

// One query row (b, h, i) of K/V head g, its n allowed keys and its dO.
struct GradRow {
  int64_t b = 0, h = 0, i = 0, g = 0;
  size_t row = 0;
  double n = 0;
  std::vector<double> dout;
};

// Per K/V row (b, g, j): sum over contributing queries of the carried
// errors (err_*) and of the magnitudes the sums' roundings act on (mag_*),
// and the number of contributing queries m_j.
struct KeySums {
  std::vector<double> err_k, mag_k, err_v, mag_v, m;
};

// delta of one row and the bound of its error, by the larger of two routes.
struct Delta {
  double delta = 0, err = 0;
};

// Stage dA (dA_j and its error E_j per key, in da and e_da) and delta.
Delta delta_of_row(const Problem& p, const OracleResult& o, const Tolerances& fwd,
                   const BackwardUnits& s, const GradRow& r, double gamma_q,
                   std::vector<double>& da, std::vector<double>& e_da) {
  const int64_t b = r.b, h = r.h, i = r.i, g = r.g;
  const auto dv = static_cast<size_t>(p.dv);
  const std::vector<double>& dout = r.dout;
  // Stage dA: E_j = gamma_dv sum_d |dO_d v_jd| for the dot product's
  // roundings, plus dv eta_a for products that underflow.
  double delta = 0, sum_a_abs_da = 0, delta_err = 0;
  for (int64_t j = 0; j < p.tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;
    const auto jj = static_cast<size_t>(j);
    double x = 0, mag = 0;
    for (size_t d = 0; d < dv; ++d) {
      const double vl = p.v.at(b, g, j, static_cast<int64_t>(d)) * s.vd;
      x += dout[d] * vl;
      mag += std::fabs(dout[d] * vl);
    }
    da[jj] = x;
    e_da[jj] = s.gamma_dv * mag + static_cast<double>(dv) * s.eta_da;
    const size_t w = weight_index(p, b, h, i, j);
    const double a = o.weights[w];
    delta += a * x;
    sum_a_abs_da += a * std::fabs(x);
    // delta = sum a^_r dA^_r: each weight's error W_r times |dA_r|,
    // each dA's error E_r times a_r.
    delta_err += fwd.weights[w] * std::fabs(x) + a * e_da[jj];
  }
  // ... plus the sum's own roundings (gamma_n over sum_r a_r |dA_r|,
  // taken as gamma_{n+2}) and n products that may underflow.
  delta_err += gamma_q * sum_a_abs_da + r.n * s.eta_da;
  // Flash-style passes take delta = dO . o_i from the forward output
  // instead: the output's tolerance times |dO|, and that dot product's
  // roundings. The bound is the larger of the two routes, so either
  // algorithm is judged fairly.
  double flash_err = static_cast<double>(dv) * s.eta_a;
  for (size_t d = 0; d < dv; ++d) {
    const size_t at = out_index(p, b, h, i, static_cast<int64_t>(d));
    flash_err += std::fabs(dout[d]) * (fwd.out[at] + s.gamma_dv * std::fabs(o.out[at]));
  }
  return {delta, std::max(delta_err, flash_err)};
}

// Stages dS_j and dT_j of one row's keys, carried into dQ_i's sums (err_q,
// mag_q) and into dK_j's and dV_j's (`keys`).
void score_gradients_of_row(const Problem& p, const OracleResult& o, const Tolerances& fwd,
                            const BackwardUnits& s, const GradRow& r, const Delta& dl,
                            const std::vector<double>& da, const std::vector<double>& e_da,
                            std::vector<double>& err_q, std::vector<double>& mag_q,
                            KeySums& keys) {
  const int64_t b = r.b, h = r.h, i = r.i, g = r.g;
  const auto tk = static_cast<size_t>(p.tk);
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  const auto kv_base = static_cast<size_t>(b * p.kv_heads + g) * tk;
  const double u = s.u, e = s.e, delta = dl.delta, delta_err = dl.err;
  const std::vector<double>& dout = r.dout;
  std::fill(err_q.begin(), err_q.end(), 0.0);
  std::fill(mag_q.begin(), mag_q.end(), 0.0);
  for (int64_t j = 0; j < p.tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;
    const auto jj = static_cast<size_t>(j);
    const size_t w = weight_index(p, b, h, i, j);
    const double a = o.weights[w];
    const double W = fwd.weights[w];
    const double centred = std::fabs(da[jj] - delta);
    // Stage dS_j = a_j (dA_j - delta):
    //   W_j |dA_j - delta|       the weight's error times its factor;
    //   a_j (E_j + delta_err)    the factor's inputs' errors;
    //   u a_j (|dA_j| + |delta| + |dA_j - delta|)  the roundings of
    //     either order: subtract then multiply (u |dA_j - delta| twice)
    //     or a_j dA_j - a_j delta (u a_j |dA_j|, u a_j |delta|, then
    //     u |dS_j|); this sum bounds both;
    //   2 eta_a                  the products that may underflow.
    const double ds = a * (da[jj] - delta);
    double e_ds = W * centred + a * (e_da[jj] + delta_err) +
                  u * a * (std::fabs(da[jj]) + std::fabs(delta) + centred) + 2 * s.eta_da;
    double dtj = ds;
    if (p.softcap > 0) {
      // Stage dT_j = dS_j f_j with f_j = 1 - y_j^2, y_j = tanh(t_j / c).
      // The computed y errs by Y: the raw logit's dot product error
      // gamma_dot S_j carried by dy/dt = f / c; the tanh's e ulps (2e u)
      // and the rounding of t / c (u |y|, since x sech^2 x <= tanh x);
      // and, for an implementation that recovers y from the stored
      // logit as (s - bias) / c, the roundings of c y, of the bias's
      // addition and subtraction and of the division: 2 u |y| more
      // plus u |s_j| / c for the addition. (2e + 4) u |y| covers both.
      const double c = p.softcap;
      const double sc = o.scores[w];
      const double y = (sc - p.bias_at(b, h, i, j)) / c;
      const double f = 1 - y * y;
      const double Y = f * s.gamma_dot * o.abs_dot[w] / c + (2 * e + 4) * u * std::fabs(y) +
                       u * std::fabs(sc) / c;
      // f^ errs by |y^2 - y^^2| <= Y (2 |y| + Y), plus the roundings
      // of y^2 (u y^2) and of 1 - y^2 (u f), or of (1 - y)(1 + y)
      // (3 u f): u y^2 + 3 u f covers both forms.
      const double F = Y * (2 * std::fabs(y) + Y) + u * y * y + 3 * u * f;
      // Without linearising: |dS^ f^ - dS f| <= e_dS (f + F) + |dS| F,
      // then the product's rounding u |dS f| and its underflow.
      e_ds = e_ds * (f + F) + std::fabs(ds) * F + u * std::fabs(ds) * f + s.eta_da;
      dtj = ds * f;
    }

    // dQ_i = sigma sum_j dT_j k_j: carried errors and magnitudes.
    for (size_t d = 0; d < dk; ++d) {
      const double kl = std::fabs(p.k.at(b, g, j, static_cast<int64_t>(d)) * s.kd);
      err_q[d] += e_ds * kl;
      mag_q[d] += std::fabs(dtj) * kl;
    }
    // dK_j and dV_j collect this query's terms.
    const size_t kv = kv_base + jj;
    keys.m[kv] += 1;
    for (size_t d = 0; d < dk; ++d) {
      const double ql = std::fabs(p.q.at(b, h, i, static_cast<int64_t>(d)) * s.qd);
      keys.err_k[kv * dk + d] += e_ds * ql;
      keys.mag_k[kv * dk + d] += std::fabs(dtj) * ql;
    }
    for (size_t d = 0; d < dv; ++d) {
      keys.err_v[kv * dv + d] += W * std::fabs(dout[d]);
      keys.mag_v[kv * dv + d] += a * std::fabs(dout[d]);
    }
  }
}

// One query row: ill-conditioning, or delta (and dsink's terms), the
// stages of its keys, and the bound of its dQ_i.
void query_row_gradients(const Problem& p, const OracleResult& o, const Tolerances& fwd,
                         const BackwardUnits& s, GradRow& r, std::vector<double>& da,
                         std::vector<double>& e_da, std::vector<double>& err_q,
                         std::vector<double>& mag_q, KeySums& keys, SinkSums& sink,
                         GradTolerances& tol) {
  const int64_t b = r.b, h = r.h, i = r.i;
  const size_t row = r.row;
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  const bool sinks = !p.sink.empty();
  const double n = r.n;
  // delta and dQ_i: sums of n products; dQ also rounds sigma and
  // multiplies by it (n + 2), which covers delta's n too.
  const double gamma_q = gamma(n + 2 + s.extra_q, s.u);
  if (fwd.ill_conditioned[row] || s.gamma_dv > kFirstOrderLimit || gamma_q > kFirstOrderLimit ||
      q_cast_underflows(p, s.q_format, b, h, i)) {
    tol.ill_conditioned[row] = 1;
    ++tol.ill_conditioned_rows;
    if (sinks) sink.ill[static_cast<size_t>(h)] = 1;
    return;
  }
  for (size_t d = 0; d < dv; ++d) {
    r.dout[d] = p.dout[out_index(p, b, h, i, static_cast<int64_t>(d))];
  }
  const Delta dl = delta_of_row(p, o, fwd, s, r, gamma_q, da, e_da);
  if (sinks) {
    // dS_sink = -a_sink delta (see the top).
    const auto hh = static_cast<size_t>(h);
    const double a_sink = std::exp(p.sink[hh] - o.lse[row]);
    sink.err[hh] += fwd.sink_weight[row] * std::fabs(dl.delta) + a_sink * dl.err +
                    s.u * a_sink * std::fabs(dl.delta) + s.eta_da;
    sink.mag[hh] += a_sink * std::fabs(dl.delta);
    sink.rows[hh] += 1;
  }
  score_gradients_of_row(p, o, fwd, s, r, dl, da, e_da, err_q, mag_q, keys);
  // dQ_i: sigma times the carried errors and the sum's roundings over
  // sum_j |dT_j k_j| (gamma_{n+2}: n products, n - 1 sums, sigma's
  // rounding and the product by it, in any order); n products and the
  // product by sigma (and the descales') may underflow (eta_dq and
  // extra_q, see the top); the final rounding and underflow.
  for (size_t d = 0; d < dk; ++d) {
    const size_t at = row * dk + d;
    tol.dq[at] = kSecondOrderFactor *
                 (s.sigma * (err_q[d] + gamma_q * mag_q[d]) + n * s.eta_dq +
                  (1 + s.extra_q) * s.eta_a + s.u_out * std::fabs(o.dq[at]) + s.eta_o);
  }
}

// dK_j and dV_j sum over the m_j queries (of every head of the group)
// that allow key j: the same shape of bound as dQ_i with m_j terms; dV has
// no sigma (gamma_{m_j}, which gamma_{m_j + 2} covers).
void key_gradient_tolerances(const Problem& p, const OracleResult& o, const BackwardUnits& s,
                             const KeySums& keys, GradTolerances& tol) {
  const auto tk = static_cast<size_t>(p.tk);
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  const std::vector<double>& m = keys.m;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      bool ill = false;
      for (size_t j = 0; j < tk; ++j) {
        const size_t kv = static_cast<size_t>(b * p.kv_heads + g) * tk + j;
        const double gamma_m = gamma(m[kv] + 2 + s.extra_k, s.u);
        ill = ill || gamma_m > kFirstOrderLimit;
        for (size_t d = 0; d < dk; ++d) {
          const size_t at = kv * dk + d;
          tol.dk[at] = kSecondOrderFactor *
                       (s.sigma * (keys.err_k[at] + gamma_m * keys.mag_k[at]) + m[kv] * s.eta_dk +
                        (1 + s.extra_k) * s.eta_a + s.u_out * std::fabs(o.dk[at]) + s.eta_o);
        }
        for (size_t d = 0; d < dv; ++d) {
          const size_t at = kv * dv + d;
          tol.dv[at] = kSecondOrderFactor * (keys.err_v[at] + gamma_m * keys.mag_v[at] +
                                             m[kv] * s.eta_a + s.u_out * std::fabs(o.dv[at]) +
                                             s.eta_o);
        }
      }
      // A K/V row's sum beyond first order makes every query row of the
      // group unjudgeable (they all feed it).
      if (ill) mark_group_ill_conditioned(p, o, b, g, tol);
    }
  }
}

// A bound that is not finite means an intermediate (dA = dO V^T, dS, a
// sum of them) passes the largest finite value: beyond the analysis, for
// every row of the (b, K/V head) group that feeds it.
void mark_groups_with_infinite_bounds(const Problem& p, const OracleResult& o,
                                      GradTolerances& tol) {
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      bool finite = true;
      for (int64_t j = 0; j < p.tk; ++j) {
        const size_t kv = static_cast<size_t>((b * p.kv_heads + g) * p.tk + j);
        for (size_t d = 0; d < dk; ++d) finite = finite && std::isfinite(tol.dk[kv * dk + d]);
        for (size_t d = 0; d < dv; ++d) finite = finite && std::isfinite(tol.dv[kv * dv + d]);
      }
      for (int64_t h = 0; h < p.heads; ++h) {
        if (p.kv_head(h) != g) continue;
        for (int64_t i = 0; i < p.tq; ++i) {
          const size_t row = row_index(p, b, h, i);
          for (size_t d = 0; d < dk; ++d) finite = finite && std::isfinite(tol.dq[row * dk + d]);
        }
      }
      if (!finite) mark_group_ill_conditioned(p, o, b, g, tol);
    }
}

// The gradients' tolerances of a dense problem (a varlen one's sequence);
// dsink's sums are added to `sink` (when the problem has a sink).
GradTolerances grad_tolerances_dense(const Problem& p, const OracleResult& o,
                                     const PrecisionTraits& declared, SinkSums& sink) {
  const PrecisionTraits t = one_format(declared, combo_of(p).kv);
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const auto tk = static_cast<size_t>(p.tk);
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  const auto kv_rows = static_cast<size_t>(p.batch * p.kv_heads) * tk;
  if (p.dout.size() != rows * dv) {
    throw std::invalid_argument("grad_tolerances: the problem's dout has " +
                                std::to_string(p.dout.size()) + " elements, expected " +
                                std::to_string(rows * dv));
  }
  if (o.dq.size() != rows * dk || o.dk.size() != kv_rows * dk || o.dv.size() != kv_rows * dv) {
    throw std::invalid_argument(
        "grad_tolerances: the oracle result has no gradients (dq, dk, dv) for this problem");
  }

  // Weights' and outputs' bounds, and the forward's ill-conditioned rows.
  const Tolerances fwd = tolerances(p, o, declared);

  GradTolerances tol;
  tol.dq.assign(o.dq.size(), 0.0);
  tol.dk.assign(o.dk.size(), 0.0);
  tol.dv.assign(o.dv.size(), 0.0);
  tol.ill_conditioned.assign(rows, 0);
  const BackwardUnits s = backward_units(p, declared, t);

  KeySums keys{std::vector<double>(kv_rows * dk, 0.0), std::vector<double>(kv_rows * dk, 0.0),
               std::vector<double>(kv_rows * dv, 0.0), std::vector<double>(kv_rows * dv, 0.0),
               std::vector<double>(kv_rows, 0.0)};
  std::vector<double> da(tk), e_da(tk);
  std::vector<double> err_q(dk), mag_q(dk);
  GradRow r;
  r.dout.resize(dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        // Empty rows contribute exactly nothing; their dQ is exactly 0.
        if (o.row_empty[row]) continue;
        r.b = b;
        r.h = h;
        r.i = i;
        r.g = g;
        r.row = row;
        r.n = static_cast<double>(o.row_allowed[row]);
        query_row_gradients(p, o, fwd, s, r, da, e_da, err_q, mag_q, keys, sink, tol);
      }
    }
  }
  key_gradient_tolerances(p, o, s, keys, tol);
  mark_groups_with_infinite_bounds(p, o, tol);
  return tol;
}

}  // namespace

GradTolerances grad_tolerances(const Problem& p, const OracleResult& o, const PrecisionTraits& t) {
  const auto heads = static_cast<size_t>(p.heads);
  SinkSums sink{std::vector<double>(heads, 0.0), std::vector<double>(heads, 0.0),
                std::vector<double>(heads, 0.0), std::vector<uint8_t>(heads, 0)};
  const bool with_sink = !p.sink.empty();
  if (with_sink && o.dsink.size() != heads) {
    throw std::invalid_argument("grad_tolerances: the oracle result has no dsink for this problem");
  }
  const PrecisionTraits one = one_format(t, combo_of(p).kv);
  const double u = unit_roundoff(one.accum);
  const double eta_a = underflow_unit(one.accum, one.flushes(kFtzAccum));
  const double eta_o = underflow_unit(p.dtype, one.flushes(kFtzOut));
  const double u_out = (p.dtype == one.accum ? 0.0 : unit_roundoff(p.dtype)) + kOracleRounding;
  if (!p.varlen()) {
    GradTolerances tol = grad_tolerances_dense(p, o, t, sink);
    if (with_sink) tol.dsink = dsink_tolerances(sink, o, u, u_out, eta_a, eta_o);
    return tol;
  }
  if (o.sequences.size() != static_cast<size_t>(p.batch) || p.dout.empty()) {
    throw std::invalid_argument(
        "grad_tolerances: a varlen problem needs a dout and the oracle's per-sequence results");
  }
  GradTolerances tol;
  tol.dq.assign(o.dq.size(), 0.0);
  tol.dk.assign(o.dk.size(), 0.0);
  tol.dv.assign(o.dv.size(), 0.0);
  tol.ill_conditioned.assign(o.lse.size(), 0);
  const auto judge = [&](const Problem& sp, const OracleResult& os, const SequencePlacement& at) {
    const GradTolerances ts = grad_tolerances_dense(sp, os, t, sink);
    tol.ill_conditioned_rows += ts.ill_conditioned_rows;
    at.rows(tol.ill_conditioned, ts.ill_conditioned);
    at.query_rows(tol.dq, ts.dq, p.dk);
    at.key_rows(tol.dk, ts.dk, p.dk);
    at.key_rows(tol.dv, ts.dv, p.dv);
  };
  for_each_sequence(p, o, judge);
  if (with_sink) tol.dsink = dsink_tolerances(sink, o, u, u_out, eta_a, eta_o);
  return tol;
}

}  // namespace attncheck
