// The oracle's fast path: double-double (DD) arithmetic with a rigorous
// error bound for every reported forward value.
//
// The bound. Every DD operation below is one of the algorithms analysed by
// Joldes, Muller and Popescu ("Tight and rigorous error bounds for basic
// building blocks of double-word arithmetic", ACM TOMS 2017): DD + DD
// (accurate version) <= 3u^2, DD * DD <= 5u^2 (with this Dekker product),
// DD * double <= 2u^2, DD / DD <= 15u^2 relative, with u = 2^-53.
// kOp = 32u^2 covers each with a wide margin. Products of doubles are exact
// (Dekker's algorithm), which needs no overflow and no underflow: the
// inputs are restricted to [2^-200, 2^200] in magnitude (or 0), otherwise
// the group goes to the exact path. The scores' dot products use Ogita,
// Rump and Oishi's Dot2 (error-free products and sums, compensations
// summed in double): the error of the pair (sum, compensation) is below
// 2n(n + 1)u^2 sum |q_c k_c| (each compensation term is at most u times a
// partial sum or a product, and their recursive summation adds gamma_2n).
// exp uses exact tables exp(-a), exp(-b/1024) rounded to DD by MPFR and a
// degree-8 Taylor polynomial on |r| <= 2^-11 (truncation 2^-117): below
// 64u^2 relative, bounded here by kExp = 2^-96 = 1024u^2.
// These errors are propagated to every weight, output and lse (see
// row()), each inflated by a factor covering the roundings of the bound's
// own computation, and a value is kept only when its whole interval
// value +- bound lies strictly between the two midpoints around the double
// it reports. Softcap s = c tanh(t / c) is evaluated as c (1 - e) / (1 + e)
// with e = exp(-2 |t / c|) (see softcapped()): its error is absolute and
// carried in the score's. Everything else (gradients, values too close to
// a midpoint, rows with scores spread over more than 600) is left
// undecided for exact.cpp.

#include <mpfr.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "internal.h"

namespace attncheck::oracle_detail {
namespace {

constexpr double kU = 0x1p-53;
constexpr double kU2 = kU * kU;
constexpr double kOp = 32 * kU2;
constexpr double kExp = 0x1p-96;
constexpr double kFlushBelow = -600;  // exp(-600) ~ 2^-865.6
constexpr double kFlushError = 0x1p-860;

struct DD {
  double hi = 0, lo = 0;
};

inline DD two_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
inline DD fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}
// Veltkamp's split: a = hi + lo with 26-bit halves (|a| < 2^996).
inline DD split(double a) {
  const double t = 134217729.0 * a, hi = t - (t - a);
  return {hi, a - hi};
}
// Dekker's exact product from pre-split operands.
inline DD two_prod(double a, DD as, double b, DD bs) {
  const double p = a * b;
  return {p, ((as.hi * bs.hi - p) + as.hi * bs.lo + as.lo * bs.hi) +
                 as.lo * bs.lo};
}
inline DD two_prod(double a, double b) {
  return two_prod(a, split(a), b, split(b));
}
inline DD add(DD x, DD y) {
  DD s = two_sum(x.hi, y.hi);
  const DD t = two_sum(x.lo, y.lo);
  s.lo += t.hi;
  s = fast_two_sum(s.hi, s.lo);
  s.lo += t.lo;
  return fast_two_sum(s.hi, s.lo);
}
inline DD add(DD x, double y) {
  DD s = two_sum(x.hi, y);
  s.lo += x.lo;
  return fast_two_sum(s.hi, s.lo);
}
inline DD mul(DD x, double y) {
  const DD c = two_prod(x.hi, y);
  const DD t = fast_two_sum(c.hi, x.lo * y);
  return fast_two_sum(t.hi, t.lo + c.lo);
}
inline DD mul(DD x, DD y) {
  DD p = two_prod(x.hi, y.hi);
  p.lo += x.hi * y.lo + x.lo * y.hi;
  return fast_two_sum(p.hi, p.lo);
}
inline DD div(DD x, DD y) {
  const double th = x.hi / y.hi;
  const DD r = mul(y, th);
  const double d = (x.hi - r.hi) + (x.lo - r.lo);
  return fast_two_sum(th, d / y.hi);
}

// exp(-a), exp(-b/1024) and 1/k! rounded to DD (each within u^2 relative).
struct Tables {
  std::array<DD, 601> whole;
  std::array<DD, 1024> frac;
  std::array<DD, 9> inv_fact;
  Tables() {
    mpfr_t x, y;
    mpfr_init2(x, 256);
    mpfr_init2(y, 256);
    auto to_dd = [&](DD& out) {
      out.hi = mpfr_get_d(x, MPFR_RNDN);
      mpfr_sub_d(y, x, out.hi, MPFR_RNDN);
      out.lo = mpfr_get_d(y, MPFR_RNDN);
    };
    for (size_t a = 0; a < whole.size(); ++a) {
      mpfr_set_si(x, -static_cast<long>(a), MPFR_RNDN);
      mpfr_exp(x, x, MPFR_RNDN);
      to_dd(whole[a]);
    }
    for (size_t b = 0; b < frac.size(); ++b) {
      mpfr_set_si(x, -static_cast<long>(b), MPFR_RNDN);
      mpfr_div_ui(x, x, 1024, MPFR_RNDN);
      mpfr_exp(x, x, MPFR_RNDN);
      to_dd(frac[b]);
    }
    for (size_t k = 0; k < inv_fact.size(); ++k) {
      mpfr_fac_ui(y, static_cast<unsigned long>(k), MPFR_RNDN);
      mpfr_ui_div(x, 1, y, MPFR_RNDN);
      to_dd(inv_fact[k]);
    }
    mpfr_clear(x);
    mpfr_clear(y);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// exp(x) for kFlushBelow <= x <= 2^-11, within kExp relative.
inline DD exp_dd(DD x, const Tables& t) {
  const auto m = static_cast<int>(std::nearbyint(-x.hi * 1024));
  const int mm = std::max(m, 0);
  // x.hi + mm/1024 is exact (Sterbenz), so r is x + mm/1024 exactly.
  const DD r = two_sum(x.hi + mm / 1024.0, x.lo);
  DD acc = t.inv_fact[8];
  for (int k = 7; k >= 0; --k) acc = add(mul(acc, r), t.inv_fact[static_cast<size_t>(k)]);
  return mul(mul(acc, t.whole[static_cast<size_t>(mm / 1024)]),
             t.frac[static_cast<size_t>(mm % 1024)]);
}

// Whether every real within err of x.hi + x.lo rounds to x.hi; then out is
// that double.
bool decided(DD x, double err, double& out) {
  if (!(err >= 0) || !std::isfinite(x.hi)) return false;
  if (x.hi == 0) {
    if (x.lo != 0 || err != 0) return false;
    out = 0.0;
    return true;
  }
  const double mag = std::fabs(x.hi);
  if (mag < 0x1p-1000 || mag > 0x1p1000) return false;
  constexpr double kMargin = 1 - 0x1p-40;
  const double up = std::nextafter(x.hi, INFINITY) - x.hi;
  const double down = x.hi - std::nextafter(x.hi, -INFINITY);
  if (!(x.lo + err < 0.5 * up * kMargin)) return false;
  if (!(x.lo - err > -0.5 * down * kMargin)) return false;
  out = x.hi;
  return true;
}

bool in_range(double x) {
  const double a = std::fabs(x);
  return a == 0 || (a >= 0x1p-200 && a <= 0x1p200);
}

// The softcapped score c tanh(t / c) of a DD t (SPEC 1), and in `err` a
// bound on its absolute error against c tanh(t~ / c) for the real t~ = t.hi
// + t.lo (the caller adds t's own error: the map has slope at most 1, so
// an error of t carries over unchanged). With y = t / c (DD / double,
// within kOp relative) and e = exp(-2 |y|) (exp_dd, kExp relative),
// tanh |y| = (1 - e) / (1 + e):
//   - y's rounding moves tanh by at most kOp |y| (slope <= 1), so c tanh
//     by kOp |t| (1.01 for the hi part's rounding);
//   - e's error moves (1 - e) / (1 + e) by at most 2 kExp e (its slope is
//     -2 / (1 + e)^2); 1 - e, 1 + e and their quotient are within 3u^2,
//     3u^2 and 15u^2 relative (kOp each) of a quotient at most 1;
//   - the product by c is within 2u^2 relative (kOp |s|).
// Past |2y| = 600, tanh |y| is 1 within 2 e^{-600} < kFlushError and e is
// not formed. c is in [2^-200, 2^200] (in_range) so nothing leaves
// Dekker's range: |t / c| <= 2^400 and the product is at most |c|.
DD softcapped(DD t, double c, double& err) {
  const DD y = div(t, DD{c, 0});
  const bool negative = y.hi < 0;
  const DD a = negative ? DD{-y.hi, -y.lo} : y;
  DD th;
  double th_err;
  if (-2 * a.hi < kFlushBelow) {
    th = DD{1, 0};
    th_err = kFlushError;
  } else {
    const DD e = exp_dd(DD{-2 * a.hi, -2 * a.lo}, tables());
    th = div(add(DD{1, 0}, DD{-e.hi, -e.lo}), add(DD{1, 0}, e));
    th_err = 2 * kExp * 1.01 * e.hi + 3 * kOp;
  }
  if (negative) th = DD{-th.hi, -th.lo};
  const DD s = mul(th, c);
  err = 1.01 * kOp * std::fabs(t.hi) + std::fabs(c) * th_err + kOp * std::fabs(s.hi);
  return s;
}

// The K/V group's keys (pre-split for Dekker's product) and values, with
// each value column's largest magnitude.
struct GroupKV {
  std::vector<double> kmat, vmat, vmax;
  std::vector<DD> ksplit;
};

// Loads group (b, g) into kv; false when an input leaves Dekker's range.
bool load_group(const Problem& p, int64_t b, int64_t g, GroupKV& kv) {
  const auto tk = static_cast<size_t>(p.tk), dk = static_cast<size_t>(p.dk),
             dv = static_cast<size_t>(p.dv);
  kv.kmat.assign(tk * dk, 0.0);
  kv.vmat.assign(tk * dv, 0.0);
  kv.vmax.assign(dv, 0.0);
  kv.ksplit.assign(tk * dk, DD{});
  for (size_t j = 0; j < tk; ++j) {
    const auto jj = static_cast<int64_t>(j);
    for (size_t c = 0; c < dk; ++c) {
      const double x = p.k.at(b, g, jj, static_cast<int64_t>(c));
      if (!in_range(x)) return false;
      kv.kmat[j * dk + c] = x;
      kv.ksplit[j * dk + c] = split(x);
    }
    for (size_t c = 0; c < dv; ++c) {
      const double x = p.v.at(b, g, jj, static_cast<int64_t>(c));
      if (!in_range(x)) return false;
      kv.vmat[j * dv + c] = x;
      kv.vmax[c] = std::max(kv.vmax[c], std::fabs(x));
    }
  }
  return true;
}

// Whether the queries and bias of heads [h0, h1) stay in Dekker's range.
bool queries_in_range(const Problem& p, int64_t b, int64_t h0, int64_t h1) {
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t i = 0; i < p.tq; ++i) {
      for (int64_t c = 0; c < p.dk; ++c)
        if (!in_range(p.q.at(b, h, i, c))) return false;
      if (p.bias)
        for (int64_t j = 0; j < p.tk; ++j)
          if (!in_range(p.bias_at(b, h, i, j))) return false;
    }
  }
  return true;
}

// How the problem turns a dot product into a score and a weighted sum into
// an output (see fast_group for the descales' bounds).
struct Scoring {
  bool descaled = false;
  DD eff;               // scale qd kd
  double vdesc = 1.0;   // the output's descale
  double dot_coef = 0;  // Dot2's error per unit of sum |q_c k_c|
  double n_dk = 0;
};

// One row's working arrays, sized once per group.
struct RowWork {
  std::vector<double> q, serr;
  std::vector<DD> qsplit, s, e, num;
  std::vector<double> nabs;
  std::vector<uint8_t> ok;
};

// The scores of row (b, h, i) in w.s, their error bounds in w.serr and
// which keys are allowed in w.ok; the diagnostics scores and abs_dot in r.
void row_scores(const Problem& p, const GroupKV& kv, const Scoring& sc, int64_t b, int64_t h,
                int64_t i, RowWork& w, OracleResult& r) {
  const auto tk = static_cast<size_t>(p.tk), dk = static_cast<size_t>(p.dk);
  const bool cap = p.softcap > 0;
  const double scale = p.scale;
  constexpr size_t kBlock = 4;
  for (size_t c = 0; c < dk; ++c) {
    w.q[c] = p.q.at(b, h, i, static_cast<int64_t>(c));
    w.qsplit[c] = split(w.q[c]);
  }
  // Scores by Dot2, kBlock keys at a time so that the dependency
  // chains of the compensated sums interleave.
  for (size_t j0 = 0; j0 < tk; j0 += kBlock) {
    const size_t nb = std::min(kBlock, tk - j0);
    double sh[kBlock] = {}, scomp[kBlock] = {}, sa[kBlock] = {};
    for (size_t c = 0; c < dk; ++c) {
      for (size_t u = 0; u < nb; ++u) {
        const size_t x = (j0 + u) * dk + c;
        const DD pr = two_prod(w.q[c], w.qsplit[c], kv.kmat[x], kv.ksplit[x]);
        const DD t = two_sum(sh[u], pr.hi);
        sh[u] = t.hi;
        scomp[u] += t.lo + pr.lo;
        sa[u] += std::fabs(pr.hi);
      }
    }
    for (size_t u = 0; u < nb; ++u) {
      const size_t j = j0 + u;
      const auto jj = static_cast<int64_t>(j);
      const DD dot = fast_two_sum(sh[u], scomp[u]);
      DD t;
      double err;
      if (sc.descaled) {
        t = mul(dot, sc.eff);
        err = std::fabs(sc.eff.hi) * 1.01 * sc.dot_coef * sa[u] + 2 * kOp * std::fabs(t.hi);
      } else {
        t = mul(dot, scale);
        err = std::fabs(scale) * sc.dot_coef * sa[u] + kOp * std::fabs(t.hi);
      }
      if (cap) {
        double cap_err = 0;
        t = softcapped(t, p.softcap, cap_err);
        err += cap_err;
      }
      if (p.bias) {
        t = add(t, p.bias_at(b, h, i, jj));
        err += kOp * std::fabs(t.hi);
      }
      w.s[j] = t;
      w.serr[j] = err;
      w.ok[j] = p.allowed(b, h, i, jj) ? 1 : 0;
      const size_t wi = weight_index(p, b, h, i, jj);
      r.scores[wi] = t.hi;
      r.abs_dot[wi] = std::fabs(sc.eff.hi) * sa[u];
    }
  }
}

// A row's denominator l = sum of its exp terms, with its error bounds.
struct RowSum {
  double n = 0;  // terms of l: the allowed keys and the sink
  double m = 0;  // the max over the allowed scores and the sink
  DD l;
  double rel_max = 0, flushed = 0;
  double infl = 1;  // covers the roundings of the bounds' own sums
  double lerr = 0;  // bound on l's error
  double lden = 0;  // a lower bound on the exact l
};

// The exp terms of row `row` (its scores in w) in w.e and their sum in rs;
// row_max and row_sum in r. False sends the group to the exact path.
bool row_sum(const Problem& p, const Scoring& sc, int64_t h, size_t row, int64_t n_allowed,
             RowWork& w, RowSum& rs, OracleResult& r) {
  const auto tk = static_cast<size_t>(p.tk);
  const Tables& tab = tables();
  // Sinks (SPEC 1.1): one more term exp(sink_h - m) of l, m the max over
  // the scores and the sink. z - m is a difference of two doubles, exact
  // in DD; the sink has value 0, so it adds nothing to the numerators.
  const bool sinks = !p.sink.empty();
  const double n = static_cast<double>(n_allowed) + (sinks ? 1 : 0);
  const double z = sinks ? p.sink[static_cast<size_t>(h)] : 0.0;
  const double infl = 1 + 4 * (n + sc.n_dk + 2) * kU + 0x1p-40;
  double m = -INFINITY;
  for (size_t j = 0; j < tk; ++j)
    if (w.ok[j]) m = std::max(m, w.s[j].hi);
  if (sinks) m = std::max(m, z);
  // m is an exact double: the weights do not depend on it.
  r.row_max[row] = m;
  double rel_max = 0, sum_err = 0, flushed = 0;
  DD l;
  for (size_t j = 0; j < tk; ++j) {
    if (!w.ok[j]) continue;
    const DD x = add(w.s[j], -m);
    const double delta = w.serr[j] + kOp * std::fabs(x.hi);
    if (x.hi < kFlushBelow) {
      w.e[j] = DD{};
      flushed += 1;
      continue;
    }
    // Outside the linearisation below: leave the whole group to the
    // exact path (the values decided so far stay valid).
    if (delta > 0x1p-20 || x.hi > 0x1p-11) return false;
    w.e[j] = exp_dd(x, tab);
    // exp(x*) = exp(x) exp(x* - x), |x* - x| <= delta <= 2^-20.
    const double rel = 1.02 * (kExp + delta);
    rel_max = std::max(rel_max, rel);
    sum_err += w.e[j].hi * rel;
    l = add(l, w.e[j]);
  }
  if (sinks) {
    const DD x = two_sum(z, -m);  // exact
    if (x.hi < kFlushBelow) {
      flushed += 1;
    } else {
      if (x.hi > 0x1p-11) return false;
      const DD es = exp_dd(x, tab);
      const double rel = 1.02 * (kExp + kOp * std::fabs(x.hi));
      rel_max = std::max(rel_max, rel);
      sum_err += es.hi * rel;
      l = add(l, es);
    }
  }
  r.row_sum[row] = l.hi;
  const double lerr = (sum_err * (1 + 2 * kExp) + flushed * kFlushError + n * kOp * l.hi) * infl;
  const double lden = l.hi * (1 - 0x1p-50) - lerr;  // <= exact l
  rs = RowSum{n, m, l, rel_max, flushed, infl, lerr, lden};
  return lden > 0.5;
}

// The weights e_j / l of row (b, h, i), each decided or not.
void row_weights(const Problem& p, int64_t b, int64_t h, int64_t i, const RowWork& w,
                 const RowSum& rs, OracleResult& r, Decided& dec) {
  const auto tk = static_cast<size_t>(p.tk);
  for (size_t j = 0; j < tk; ++j) {
    if (!w.ok[j]) continue;
    const size_t wi = weight_index(p, b, h, i, static_cast<int64_t>(j));
    const DD a = div(w.e[j], rs.l);
    const double ej_err = w.e[j].hi == 0 ? kFlushError : w.e[j].hi * 1.02 * (kExp + w.serr[j]);
    const double err =
        ((ej_err + std::fabs(a.hi) * rs.lerr) / rs.lden + kOp * std::fabs(a.hi)) * rs.infl;
    dec.weights[wi] = decided(a, err, r.weights[wi]);
  }
}

// The outputs (sum_j e_j v_j) / l of row (b, h, i), each decided or not.
void row_outputs(const Problem& p, const GroupKV& kv, const Scoring& sc, int64_t b, int64_t h,
                 int64_t i, RowWork& w, const RowSum& rs, OracleResult& r, Decided& dec) {
  const auto tk = static_cast<size_t>(p.tk), dv = static_cast<size_t>(p.dv);
  // Numerators sum_j e_j v_j by Dot2 over j, all columns at once.
  std::fill(w.num.begin(), w.num.end(), DD{});
  std::fill(w.nabs.begin(), w.nabs.end(), 0.0);
  for (size_t j = 0; j < tk; ++j) {
    if (!w.ok[j] || w.e[j].hi == 0) continue;
    const DD es = split(w.e[j].hi);
    const double eh = w.e[j].hi, el = w.e[j].lo;
    const double* v = &kv.vmat[j * dv];
    for (size_t c = 0; c < dv; ++c) {
      const DD pr = two_prod(eh, es, v[c], split(v[c]));
      const DD t = two_sum(w.num[c].hi, pr.hi);
      w.num[c].hi = t.hi;
      w.num[c].lo += t.lo + (pr.lo + el * v[c]);
      w.nabs[c] += eh * std::fabs(v[c]);
    }
  }
  const double terms = rs.n + 2;
  const double num_coef = rs.rel_max * (1 + 2 * kExp) + 3.3 * terms * terms * kU2;
  for (size_t c = 0; c < dv; ++c) {
    const size_t o = out_index(p, b, h, i, static_cast<int64_t>(c));
    const DD nd = fast_two_sum(w.num[c].hi, w.num[c].lo);
    const double nerr = (num_coef * w.nabs[c] + rs.flushed * kFlushError * kv.vmax[c]) * rs.infl;
    DD out = div(nd, rs.l);
    double err =
        ((nerr + std::fabs(out.hi) * rs.lerr) / rs.lden + kOp * std::fabs(out.hi)) * rs.infl;
    if (sc.descaled) {
      out = mul(out, sc.vdesc);
      err = (err * sc.vdesc + kOp * std::fabs(out.hi)) * rs.infl;
    }
    dec.out[o] = decided(out, err, r.out[o]);
  }
}

// lse = m + log l: one Newton step y1 = y0 + l exp(-y0) - 1 from the
// libm value y0 = log(l.hi), whose error d <= 2^-50 (1 + y0) leaves
// at most d^2 / 2 (1.01).
void row_lse(size_t row, const RowSum& rs, OracleResult& r, Decided& dec) {
  const double y0 = std::log(rs.l.hi);
  if (y0 > -0x1p-40 && y0 < -kFlushBelow) {
    const DD z = add(mul(rs.l, exp_dd(DD{-y0, 0}, tables())), -1.0);
    const DD lse = add(add(z, y0), rs.m);
    const double d0 = 0x1p-50 * (1 + std::fabs(y0));
    const double err =
        (1.1 * kExp * 2 + 0.6 * d0 * d0 + rs.lerr / rs.lden + kOp * (std::fabs(lse.hi) + 2)) *
        rs.infl;
    dec.lse[row] = decided(lse, err, r.lse[row]);
  }
}

}  // namespace

bool fast_group(const Problem& p, int64_t b, int64_t g, OracleResult& r, Decided& dec) {
  if (!in_range(p.scale) || !in_range(p.softcap)) return false;
  // Descales (SPEC 1.1): the logical score is (scale qd kd) q . k and the
  // output vd sum_j a_j v_j. eff = scale qd kd is two_prod(scale, qd)
  // (exact) times kd (DD * double, within 2u^2 relative, inside kOp); the
  // score is then dot * eff (DD * DD, kOp), and its error carries the
  // dot's error times |eff| (1.01 covers eff.lo) plus kOp |t| for eff's
  // own error: 2 kOp |t| with the product's. The output's product by vd
  // (DD * double) is one more kOp |o|, and vd times the quotient's error.
  // Descales are kept in [2^-100, 2^100] so no product leaves the range
  // of Dekker's algorithm; others go to the exact path.
  Scoring sc;
  sc.descaled = p.descale && (p.descale->q != 1 || p.descale->k != 1 || p.descale->v != 1);
  const auto descale_in_range = [](double x) { return x >= 0x1p-100 && x <= 0x1p100; };
  if (sc.descaled && !(descale_in_range(p.descale->q) && descale_in_range(p.descale->k) &&
                       descale_in_range(p.descale->v)))
    return false;
  sc.eff = sc.descaled ? mul(two_prod(p.scale, p.descale->q), p.descale->k) : DD{p.scale, 0};
  sc.vdesc = sc.descaled ? p.descale->v : 1.0;
  const auto tk = static_cast<size_t>(p.tk), dk = static_cast<size_t>(p.dk),
             dv = static_cast<size_t>(p.dv);
  const int64_t group = p.heads / p.kv_heads;
  const int64_t h0 = g * group, h1 = h0 + group;
  GroupKV kv;
  if (!load_group(p, b, g, kv) || !queries_in_range(p, b, h0, h1)) return false;

  sc.n_dk = static_cast<double>(dk);
  sc.dot_coef = 2.2 * sc.n_dk * (sc.n_dk + 1) * kU2;
  RowWork w;
  w.q.resize(dk);
  w.serr.resize(tk);
  w.qsplit.resize(dk);
  w.s.resize(tk);
  w.e.resize(tk);
  w.num.resize(dv);
  w.nabs.resize(dv);
  w.ok.resize(tk);
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t i = 0; i < p.tq; ++i) {
      const size_t row = row_index(p, b, h, i);
      row_scores(p, kv, sc, b, h, i, w, r);
      const int64_t n_allowed = r.row_allowed[row];
      if (n_allowed == 0) continue;  // empty or sink-only: set by the caller
      RowSum rs;
      if (!row_sum(p, sc, h, row, n_allowed, w, rs, r)) return false;
      row_weights(p, b, h, i, w, rs, r, dec);
      row_outputs(p, kv, sc, b, h, i, w, rs, r, dec);
      row_lse(row, rs, r, dec);
    }
  }
  return true;
}

}  // namespace attncheck::oracle_detail
