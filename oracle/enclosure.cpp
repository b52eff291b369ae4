// The enclosure: SPEC 4's double tier for real sizes. Every reported value
// v comes with a radius r such that the exact result lies in [v - r, v + r].
// Nothing is measured: each step's error is bounded by analysis.
//
// Per (batch b, head h), with u = 2^-53 the unit roundoff of double and
// gamma_n = n u / (1 - n u), the slices copied to contiguous matrices
// (a NaN or infinity no row can see is replaced by 0: it cannot change the
// result, and 0 keeps it out of the products):
//  1. T = Q K^T and A = |Q| |K|^T by Eigen's GEMM. Whatever its blocking and
//     FMA use, each element is a dot product of dk terms:
//     |T^ - T| <= gamma_dk A, and A <= A^ / (1 - gamma_dk).
//  2. s^ = fl(sigma T^) (then fl(s^ + bias)): |s^ - s| <= e_j with
//     e_j = gamma_{dk+1} |sigma| A + u |s^| / (1 - u)  (the scaling and the
//     bias addition one rounding each).
//  3. m^ = max over allowed s^_j. Softmax does not depend on the shift, so
//     w_j = exp(s_j - m^) for the exact s_j and the double m^. With
//     x^_j = fl(s^_j - m^) (error u |x^_j|) and rho_j = e_j + u |x^_j|,
//     w^_j = bounded_exp(x^_j) (relative error delta <= kBoundedExpError,
//     below) gives |w_j - w^_j| <= r_j = w^_j (delta + 2 rho_j) + 2^-1074:
//     for rho, delta <= 1/4, (1 + delta) e^rho - 1 <= delta + 2 rho and
//     1 - (1 - delta) e^-rho <= delta + rho; 2^-1074 covers a subnormal
//     result's rounding. A row with rho_j > 1/4 gets an infinite radius
//     (the caller falls back to the certified oracle).
//  4. l^ = fl(sum w^_j) over tk terms: |l - l^| <= R_l = sum r_j +
//     gamma_tk l^ / (1 - gamma_tk); l >= l_lo = l^ - R_l > 0.
//  5. N^ = W^ V (GEMM, tk terms): |N - N^| <= R_N = (gamma_tk W^ + R) |V|,
//     one more GEMM on nonnegative matrices.
//  6. o^ = fl(N^ / l^): |N / l - o^| <= (R_N + |N^| R_l / l^) / l_lo
//     + u |o^|; weights a^_j = fl(w^_j / l^) likewise with r_j for R_N.
//  7. lse = m^ + log l: y = log(l^) (glibc, not trusted) is turned into
//     proven bounds y_lo <= log(l_lo), log(l_hi) <= y_hi by checking
//     bounded_exp(y_lo) (1 + delta) <= l_lo and bounded_exp(y_hi)
//     (1 - delta) >= l_hi, widening until both hold; then the sum with m^
//     adds u |lse| on each side.
// Every bound in 3-7 is itself computed in double from nonnegative terms
// with at most 2^20 roundings (rows of at most 2^20 keys, enforced): its
// relative error is at most gamma_{2^20} < 1.2e-10 < 2^-32, so multiplying
// it by kInflate = 1 + 2^-32 (and one more rounding, u) keeps it an upper
// bound. Exact elements (masked weights, empty rows' zeros and -inf) have
// radius 0.
//
// Version 2 parts (SPEC 1.1) it takes: input formats (they only restrict
// the stored values), sinks and descales; varlen problems are left to the
// certified oracle.
//  - Descales: step 2 scales by eff^ = fl(fl(sigma qd) kd), within gamma_2
//    |eff| of eff = sigma qd kd; with |T^| <= (1 + gamma_dk) A, the score
//    gains |T^| |eff - eff^| <= gamma_2 (1 + gamma_dk) |eff| A, so e_j =
//    (gamma_{dk+1} + gamma_2 (1 + gamma_dk)) |eff| A + u |s^| / (1 - u),
//    |eff| A bounded from fl(|eff^| A^) by dividing by (1 - u)(1 -
//    gamma_dk)(1 - gamma_2). The output is o^ = fl(vd fl(N^ / l^)): vd
//    times step 6's radius, plus u |o^|.
//  - A sink z: m^ = max(m^, z), one more term w_z = bounded_exp(fl(z - m^))
//    of l with rho_z = u |x^_z| (z is exact), r_z as in step 3, and value
//    0 (N is unchanged); l sums tk + 1 terms (gamma_{tk+1}). A sink-only
//    row is exact: o = 0, lse = z, radius 0 (not empty). The tolerances are at least 100 times wider than these radii
// for the f32 / bf16 / f16 implementations this tier is for; the caller
// checks that per element.

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/oracle.h"
#include "internal.h"

namespace attncheck {
namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr double kU = 0x1p-53;
constexpr double kInflate = 1 + 0x1p-32;
constexpr double kTiny = 0x1p-1074;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMaxTerms = int64_t{1} << 20;

double gamma(double n) { return n * kU / (1 - n * kU); }

// Up to a correct bound for a quantity computed from nonnegative terms
// (header comment).
double up(double x) { return x * kInflate; }

// The slice [b][h] of a rank-4 tensor as a contiguous rows x cols matrix;
// non-finite entries (which check_finite_inputs proved no row can see) as 0.
Matrix slice(const Tensor& t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  Matrix m(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      const double x = t.at(b, h, i, c);
      m(i, c) = std::isfinite(x) ? x : 0.0;
    }
  return m;
}

// Proven bounds [lo, hi] on log of every value in [l_lo, l_hi] (step 7).
bool log_bounds(double l_lo, double l_hi, double& lo, double& hi) {
  const double y_lo = std::log(l_lo), y_hi = std::log(l_hi);
  double step = 0x1p-44 * (std::fabs(y_lo) + std::fabs(y_hi) + 1);
  for (int tries = 0; tries < 20; ++tries, step *= 4) {
    lo = y_lo - step;
    hi = y_hi + step;
    // 2 delta: the products' own roundings (u) stay inside the margin.
    if (bounded_exp(lo) * (1 + 2 * kBoundedExpError) <= l_lo &&
        bounded_exp(hi) * (1 - 2 * kBoundedExpError) >= l_hi) {
      return true;
    }
  }
  return false;
}

}  // namespace

// e^x = 2^k e^r with r = x - k ln 2, |r| <= 0.35 (k rounded from x / ln 2).
// Error budget, relative to e^x, in units of u:
// - x - k ln2_hi is exact: ln2_hi has 33 significant bits and |k| <= 1076
//   (11 bits), so k ln2_hi is exact, and x lies within a factor 2 of it
//   when k != 0 (Sterbenz); r = that - k ln2_lo errs by u |r| + 1076 u
//   ln2_lo < 0.36 u absolute, which e^r turns into <= 0.36 u relative.
// - Taylor to degree 13: the remainder |r|^14 / 14! e^|r| < 1e-17 < 0.1 u
//   of e^r >= 0.70; the coefficients 1/i! rounded once each: <= u e^0.35 /
//   0.70 < 2.1 u; Horner's 26 roundings: gamma_26 e^0.35 / 0.70 < 53 u.
// - ldexp is exact, except for a subnormal result (absolute 2^-1075).
// Total below 56 u = 6.3e-15; kBoundedExpError = 2^-40 = 9.1e-13 claims
// 145 times that. test_enclosure checks it against expl at many points.
double bounded_exp(double x) {
  if (std::isnan(x)) return x;
  if (x < -746) return 0.0;  // e^x < 2^-1076: below half the smallest subnormal
  if (x > 710) return kInf;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3fe62e42fee00000
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  constexpr double kInvLn2 = 1.44269504088896338700e+00;
  const double k = std::nearbyint(x * kInvLn2);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double s = 1.0 / 6227020800.0;  // 1/13!
  s = s * r + 1.0 / 479001600.0;
  s = s * r + 1.0 / 39916800.0;
  s = s * r + 1.0 / 3628800.0;
  s = s * r + 1.0 / 362880.0;
  s = s * r + 1.0 / 40320.0;
  s = s * r + 1.0 / 5040.0;
  s = s * r + 1.0 / 720.0;
  s = s * r + 1.0 / 120.0;
  s = s * r + 1.0 / 24.0;
  s = s * r + 1.0 / 6.0;
  s = s * r + 0.5;
  s = s * r + 1.0;
  s = s * r + 1.0;
  return std::ldexp(s, static_cast<int>(k));
}

std::optional<std::string> enclosure_unsupported(const Problem& p) {
  if (p.softcap > 0) return "a softcap (the enclosure has no bounded tanh)";
  if (!p.dout.empty()) return "gradients";
  if (p.varlen()) return "packed or paged sequences (the certified oracle takes them)";
  if (p.tk + (p.sink.empty() ? 0 : 1) > kMaxTerms || p.dk > kMaxTerms)
    return "more than 2^20 keys (the sink counts) or head dims";
  return std::nullopt;
}

namespace {

// The result with every array sized for p and at its empty value.
OracleResult sized_result(const Problem& p) {
  OracleResult r;
  r.tier = OracleResult::Tier::enclosure;
  oracle_detail::size_forward(p, r);
  r.out_radius.assign(r.out.size(), 0.0);
  r.weights_radius.assign(r.weights.size(), 0.0);
  r.lse_radius.assign(r.lse.size(), 0.0);
  return r;
}

// The problem's constants in the steps' bounds (header comment).
struct Coefficients {
  bool descaled = false, sinks = false;
  double sigma = 0, abs_sigma = 0, vd = 1;
  double g_dk = 0, g_2 = 0, g_dk1 = 0, g_tk = 0;
};

Coefficients coefficients(const Problem& p) {
  Coefficients k;
  k.descaled = p.descale.has_value();
  k.sigma = k.descaled ? (p.scale * p.descale->q) * p.descale->k : p.scale;
  k.abs_sigma = std::fabs(k.sigma);
  k.vd = k.descaled ? p.descale->v : 1.0;
  k.sinks = !p.sink.empty();
  k.g_dk = gamma(static_cast<double>(p.dk));
  k.g_2 = k.descaled ? gamma(2) : 0.0;
  // Step 2's coefficient, with the descales' term (header comment).
  k.g_dk1 = gamma(static_cast<double>(p.dk) + 1) + k.g_2 * (1 + k.g_dk);
  k.g_tk = gamma(static_cast<double>(p.tk) + (k.sinks ? 1 : 0));
  return k;
}

// One (batch, head)'s working matrices: step 1's T and A, the rows' exp
// terms W^ and their radii M (then gamma_tk W^ + R), the score errors e of
// the current row, and per row R_l and whether its radii are finite.
struct HeadWork {
  Matrix T, A, W, M;
  std::vector<double> e, row_radius;
  std::vector<uint8_t> row_ok;
};

// Steps 2-4, 6 (weights) and 7 for row i of head (b, h).
void enclose_row(const Problem& p, const Coefficients& k, int64_t b, int64_t h, int64_t i,
                 HeadWork& hw, OracleResult& r) {
  const int64_t tk = p.tk;
  const auto ii = static_cast<size_t>(i);
  const size_t row = row_index(p, b, h, i);
  const size_t w0 = weight_index(p, b, h, i, 0);
  double m = -kInf;
  int64_t n = 0;
  for (int64_t j = 0; j < tk; ++j) {  // step 2
    double s = k.sigma * hw.T(i, j);
    if (p.bias) s += p.bias->at(b, h, i, j, p.tq, tk);
    const double absdot = k.abs_sigma * hw.A(i, j);
    r.scores[w0 + j] = s;
    r.abs_dot[w0 + j] = absdot;
    // |sigma| A <= fl(|sigma| A^) / ((1 - u)(1 - gamma_dk)).
    hw.e[static_cast<size_t>(j)] =
        k.g_dk1 * absdot / ((1 - kU) * (1 - k.g_dk) * (1 - k.g_2)) + kU * std::fabs(s) / (1 - kU);
    if (!p.allowed(b, h, i, j)) continue;
    ++n;
    m = std::max(m, s);
  }
  r.row_allowed[row] = n;
  const double z = k.sinks ? p.sink[static_cast<size_t>(h)] : 0.0;
  if (n == 0 && k.sinks) {
    // Sink-only: o = 0, lse = z, exactly (radius 0); not empty.
    r.lse[row] = z;
    r.row_max[row] = z;
    r.row_sum[row] = 1;
    hw.row_ok[ii] = 0;
    return;
  }
  if (n == 0) {
    r.row_empty[row] = 1;
    r.empty_rows.push_back({b, h, i});
    hw.row_ok[ii] = 0;
    return;
  }
  if (k.sinks) m = std::max(m, z);
  r.row_max[row] = m;
  double l = 0, sum_r = 0;
  bool ok = std::isfinite(m);
  if (k.sinks) {
    const double x = z - m;
    const double rho = kU * std::fabs(x);
    const double w = bounded_exp(x);
    l += w;
    sum_r += w * (kBoundedExpError + 2 * rho) + kTiny;
  }
  for (int64_t j = 0; j < tk; ++j) {  // step 3
    if (!p.allowed(b, h, i, j)) continue;
    const double x = r.scores[w0 + j] - m;
    const double rho = hw.e[static_cast<size_t>(j)] + kU * std::fabs(x);
    if (!(rho <= 0.25)) ok = false;
    const double w = bounded_exp(x);
    const double rj = w * (kBoundedExpError + 2 * rho) + kTiny;
    hw.W(i, j) = w;
    hw.M(i, j) = rj;  // gamma_tk w^ added below, once R_l is known
    l += w;
    sum_r += rj;
  }
  const double R_l = up(sum_r + k.g_tk * l / (1 - k.g_tk));  // step 4
  // (1 - 2u): the subtraction's rounding must not raise the bound.
  const double l_lo = (l - R_l) * (1 - 0x1p-52), l_hi = up(l + R_l);
  r.row_sum[row] = l;
  double y_lo = 0, y_hi = 0;
  if (!ok || !(l_lo > 0) || !log_bounds(l_lo, l_hi, y_lo, y_hi)) {
    hw.row_ok[ii] = 0;
    hw.row_radius[ii] = kInf;
    r.lse[row] = m + std::log(l);
    r.lse_radius[row] = kInf;
    for (int64_t j = 0; j < tk; ++j)
      if (p.allowed(b, h, i, j)) r.weights_radius[w0 + j] = kInf;
    return;
  }
  // Step 7: lse in [m + y_lo, m + y_hi]; 4u for the sum's rounding and
  // the widening's own, 2u more for rounding the centre.
  const double lo = (m + y_lo) - 4 * kU * std::fabs(m + y_lo);
  const double hi = (m + y_hi) + 4 * kU * std::fabs(m + y_hi);
  r.lse[row] = lo + (hi - lo) / 2;
  r.lse_radius[row] = up((hi - lo) / 2 + 2 * kU * std::fabs(r.lse[row]));
  // Step 6 for the weights.
  for (int64_t j = 0; j < tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;
    const double w = hw.W(i, j);
    const double a = w / l;
    r.weights[w0 + j] = a;
    r.weights_radius[w0 + j] = up((hw.M(i, j) + w * R_l / l) / l_lo + 2 * kU * a);
    hw.M(i, j) += k.g_tk * w;  // step 5's gamma_tk W^ + R
  }
  hw.row_radius[ii] = R_l;
}

// Steps 5 and 6 for the output of head (b, h), its rows done.
void enclose_outputs(const Problem& p, const Coefficients& k, int64_t b, int64_t h, const Matrix& V,
                     const Matrix& Vabs, const HeadWork& hw, OracleResult& r) {
  const int64_t tq = p.tq;
  Matrix N(tq, p.dv), RN(tq, p.dv);
  N.noalias() = hw.W * V;
  RN.noalias() = hw.M * Vabs;
  for (int64_t i = 0; i < tq; ++i) {
    const size_t row = row_index(p, b, h, i);
    if (r.row_empty[row] || r.row_allowed[row] == 0) continue;  // exact zeros
    const double l = r.row_sum[row];
    const double R_l = hw.row_radius[static_cast<size_t>(i)];
    const double l_lo = (l - R_l) * (1 - 0x1p-52);
    for (int64_t d = 0; d < p.dv; ++d) {
      const size_t o_i = out_index(p, b, h, i, d);
      const double o1 = N(i, d) / l;
      const double o = k.descaled ? k.vd * o1 : o1;
      const double base = (up(RN(i, d)) + std::fabs(N(i, d)) * R_l / l) / l_lo + kU * std::fabs(o1);
      r.out[o_i] = o;
      r.out_radius[o_i] = hw.row_ok[static_cast<size_t>(i)]
                              ? (k.descaled ? up(k.vd * base + kU * std::fabs(o)) : up(base))
                              : kInf;
    }
  }
}

}  // namespace

OracleResult enclose(const Problem& p) {
  if (auto why = enclosure_unsupported(p)) {
    throw std::logic_error("enclose: unsupported problem: " + *why);
  }
  oracle_detail::check_finite_inputs(p);
  OracleResult r = sized_result(p);
  const Coefficients k = coefficients(p);
  const int64_t tq = p.tq, tk = p.tk;
  Matrix K, Kabs, V, Vabs;
  int64_t cached = -1;  // (b, g) of the K/V slices held
  HeadWork hw;
  hw.W.resize(tq, tk);
  hw.M.resize(tq, tk);
  hw.e.resize(static_cast<size_t>(tk));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      if (cached != b * p.kv_heads + g) {
        K = slice(p.k, b, g, tk, p.dk);
        V = slice(p.v, b, g, tk, p.dv);
        Kabs = K.cwiseAbs();
        Vabs = V.cwiseAbs();
        cached = b * p.kv_heads + g;
      }
      const Matrix Q = slice(p.q, b, h, tq, p.dk);
      hw.T.resize(tq, tk);
      hw.A.resize(tq, tk);
      hw.T.noalias() = Q * K.transpose();                // step 1
      hw.A.noalias() = Q.cwiseAbs() * Kabs.transpose();  // step 1
      hw.W.setZero();
      hw.M.setZero();
      hw.row_radius.assign(static_cast<size_t>(tq), 0.0);
      hw.row_ok.assign(static_cast<size_t>(tq), 1);
      for (int64_t i = 0; i < tq; ++i) enclose_row(p, k, b, h, i, hw, r);
      enclose_outputs(p, k, b, h, V, Vabs, hw, r);
    }
  }
  return r;
}

}  // namespace attncheck
