#include "judge/tolerance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attncheck/dtype.h"
#include "judge/sequences.h"

// First-order error analysis of softmax attention, per element (SPEC 4).
//
// Notation, per row (b, h, i), from the oracle: s_j the exact logits after
// softcap and bias, m = max_j s_j, l = sum_j exp(s_j - m), a_j the weights,
// c the exact output element, A = sum_j a_j |v_j|, S_j = sigma sum_t |q_t k_jt|,
// n the number of allowed keys; every value is logical (stored times its
// descale, SPEC 1.1), as the oracle's are. u_a, u_p, u_o are the unit roundoffs of the
// accumulation format, of the format P is cast to before P.V (0 when it is
// not cast) and of the output format; u_s that of the format scores are
// stored in before softmax (s_cast; 0 when S stays in the accumulation
// format); e is the declared exp error in ulps.
//
// A computed logit s^_j = s_j + d_j with |d_j| <= D_j perturbs the weights to
// a_j (1 + d_j - sum_l a_l d_l) to first order, so the output moves by
// sum_j a_j d_j (v_j - c); the remaining terms are the roundings of the
// exponentials, of the sums and of the final division and cast. Products of
// (1 + delta) factors whose first-order part stays below kFirstOrderLimit
// are bounded by kSecondOrderFactor times that part (tolerance.h: 1.25,
// since 1 / (1 - 0.1)^2 = 1.234 < 1.25), which covers the second-order
// remainder of the two nested perturbations (logits, then normalisation).
//
// Where SPEC 4 writes a_j D_j, this file charges a_j (e^{D_j} - 1) (aD
// below): the exact perturbation of weight j is a_j (e^{d_j} / Z - 1) with Z
// = sum_l a_l e^{d_l}, and |e^{d_j} - 1| <= e^{D_j} - 1 whatever D_j is. The
// two agree to first order (e^x - 1 <= 1.052 x up to x = 0.1), but SPEC 4's
// limit on sum_j a_j D_j does not bound each D_j: a key of weight 2e-42 may
// have D_j = 25 (a Q8_0 Q against large keys, ggml's G1 fixture), and a
// correct kernel then returns that weight up to e^25 times the exact one,
// far past 1.25 a_j D_j. With e^{D_j} - 1 in its place the derivation holds
// for any D_j: Z >= e^{-sum a D} (Jensen) >= 1 - L and Z <= 1 + sum_l a_l
// (e^{D_l} - 1) <= 1 + L under the limit, which is now taken on
// sum_l a_l (e^{D_l} - 1); the output moves by (1 / Z) sum_j a_j (e^{d_j} -
// 1)(v_j - c), lse by log Z; and the other factors' deviation y (|y| <=
// 0.25 under the limits) multiplies 1 + (e^{D_j} - 1) to at most
// (e^{D_j} - 1)(1 + |y|) + |y|, inside kSecondOrderFactor's 1.25 for
// either term. A key with a = 0 in double, or D_j past expm1's range, is
// charged e^{s_j - lse + D_j} >= a_j (e^{D_j} - 1).
//
// Version 2 terms (SPEC 4, SPEC 1.1):
//  - A sink z = sink_h is one more key of the normalisation with logit z and
//    value 0: l gains exp(z - m), m being the max over the real scores AND
//    the sink (the oracle's row_max and row_sum count it). Its logit is
//    exact (an input), so its only logit error is the subtraction of the
//    max, D_sink = 4 u_a (|z| + |m|) as for any key; it enters sum_j a_j D_j
//    with its weight a_sink = exp(z - lse), and the spread sum_j a_j D_j
//    |v_j - c| with |0 - c| = |c|, while its a_j |v_j| is 0 (A and sum |v_j|
//    do not change). The sum l has n + 1 terms: gamma_{n+1}. A row with a
//    sink and no allowed key is not empty: o = 0, lse = z, judged with the
//    terms above (n = 0).
//  - Descaled inputs (fp8 or any format with q/k/v descales): the logical
//    logit is (sigma qd kd) q . k for stored q, k; a kernel multiplies the
//    descales into the scaled logit in the accumulation format (sigma qd,
//    times kd, times the dot product, in some order; gamma_dot already
//    counts one product by sigma): up to three more roundings of t_j,
//    D_j += 3 u_a |t_j| (SPEC 4), with |c tanh(t / c)| for |t| under a
//    softcap (a relative error of t passes through c sech^2(t / c), and
//    |t| sech^2(t / c) <= |c tanh(t / c)|, as for the softcap's own
//    roundings). A descale that the accumulation format cannot represent is
//    rounded to it first: u_a |t_j| more for each of qd, kd. The output is
//    vd times sum_j a_j v_j of stored v: the product by vd, and its
//    re-association with the division by l, 2 u_a |c| (SPEC 4), plus u_a |c|
//    when vd itself must be rounded to the accumulation format. A kernel
//    that descales q or k element by element (q_t qd rounded) errs by u_a
//    S_j instead, which this bound does not cover (SPEC 4's model is the
//    folded descale). The oracle's abs_dot is already of the logical values
//    (|sigma qd kd| sum |q k|).
//  - Every value term is of the LOGICAL values (stored times descale), as
//    the oracle's c, a_j, s_j and abs_dot are: A = sum a_j |vd v_j|, the
//    spread sum a_j D_j |vd v_j - c| and the underflow term eta_p sum |vd
//    v_j|. The kernel's errors are relative to what it sums (a_j times the
//    stored v_j), and the product by vd carries them to the logical scale.
//    Terms of the stored v would be up to 3x too small for vd = 3, and
//    the spread would compare a stored v_j with a logical c: a correct f32
//    loop failed such a bound on a subnormal output stored with vd = 2
//    that passed at budget 0.49 stored with vd = 1. (vd v_j is formed in double: a
//    relative 2^-53 of an O(u) term, inside kSecondOrderFactor.)
//  - Underflow in stored units: a product a_j v_j of the stored v_j that
//    lands below the normal range errs by eta_a in the stored scale, which
//    the later product by vd multiplies by |vd| (a kernel that descales v
//    first errs by eta_a): n eta_a max(1, |vd|). The two roundings the
//    descale costs the output (2 u_a |c| above) are absolute below the
//    normal range: 2 eta_a more.
//  - Formats: q_dtype / kv_dtype only restrict the stored values (exact
//    inputs); an fp8 p_cast (E4M3: u_p = 2^-4, its own eta_p) enters through
//    unit_roundoff / underflow_unit like any other format.
//  - Varlen problems: each sequence is judged as sequence_problem(p, b)
//    against the oracle's per-sequence result (OracleResult::sequences),
//    and the tolerances are assembled in p's layout (the oracle's), so
//    compare works element by element on the assembled arrays
//    (judge/sequences.h, which the gradients' assembly shares).

namespace attncheck {
namespace {

// Logit error of storing scores in the s_cast format, unit roundoff u_s
// (SPEC 4 "Version 2 terms"), for a key with |s_j| = `abs_s` and
// |s_j - bias_j| = `capped` (|t_j| without a softcap). Eager framework code
// rounds S to its tensor's format after each operation:
//   S1 = fl_s(q . k)         the matmul's result: a relative error u_s of
//                            q . k, which the product by sigma carries to
//                            u_s |t_j|;
//   S2 = fl_s(sigma S1)      torch's `matmul(q, k^T) * scale`: u_s |t_j| more
//                            (code that scales q first, or folds sigma into
//                            the matmul, rounds once: the bound covers it);
//   S3 = fl_s(S2 + bias_j)   the additive mask / bias: u_s |s_j|.
// Without a softcap, 2 |t_j| + |s_j| (SPEC 4's first-order start). With a
// softcap written as framework code writes it, S2 / c, tanh and * c are
// three more tensors in the format: the two errors of t_j and the rounding
// of x = t_j / c (3 u_s |x| in x) pass through c tanh'(x) = c sech^2 x, and
// c |x| sech^2 x <= c |tanh x| = |s_j - bias_j| (x sech^2 x <= tanh x), so
// they cost 3 u_s |s_j - bias_j|; tanh's and * c's roundings u_s |s_j -
// bias_j| each; 5 |s_j - bias_j| + |s_j| in all. Products of two of these
// relative errors are O(u_s^2), inside kSecondOrderFactor.
//
// Below the s_cast format's normal range a rounding errs by eta_s (half its
// smallest subnormal, or twice its smallest normal where it flushes)
// absolutely, not by u_s of the value: E4M3's eta_s = 2^-10 is far above
// u_s |s_j| for scores below 2^-6, and SPEC 4 lets E4M3 be s_cast. Each
// rounding above adds its eta_s, carried to the logit like its relative
// error: S1's by the factor that multiplies q . k after it, |sigma qd kd|
// (`carried` = max(1, that), which also covers code that scales q first);
// S2's and S3's by 1. With a softcap, S1's and S2's pass through
// sech^2 <= 1, x's and tanh's through c sech^2 <= c and c (the softcap c =
// `cap`), and * c's and the bias's by 1: (carried + 3 + 2 cap) eta_s;
// without, (carried + 2) eta_s (S3 counted even without a bias).
//
// Softmax then reads the rounded scores: its max m^ is a rounded score,
// within D_max of m, so the subtraction s^_j - m^ and the lse terms (4 u_a
// (|s_j| + |m|) and N) grow by u_a D, again a product of two small
// relative errors, inside kSecondOrderFactor; the shift itself cancels in
// the normalisation whichever key holds the max.
double s_cast_logit_error(double cap, double capped, double abs_s, double u_s, double eta_s,
                          double carried) {
  if (cap > 0) return u_s * (5 * capped + abs_s) + (carried + 3 + 2 * cap) * eta_s;
  return u_s * (2 * capped + abs_s) + (carried + 2) * eta_s;
}

// Whether storing q . k of key j (or sigma times it) in `s_format` may round
// to an infinity: |q . k| <= sum_t |q_t k_jt|, computed within gamma_dot of
// that, and the stored value may round up by u_s. Such a key is beyond any
// first-order bound: an infinity in S makes the row NaN or drops the key.
bool scores_may_overflow(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j,
                         DType s_format, double gamma_dot) {
  double abs_qk = 0;
  const int64_t g = p.kv_head(h);
  for (int64_t d = 0; d < p.dk; ++d) abs_qk += std::fabs(p.q.at(b, h, i, d) * p.k.at(b, g, j, d));
  // Logical values: the stored product times the descales.
  if (p.descale) abs_qk *= std::fabs(p.descale->q * p.descale->k);
  const double largest = abs_qk * std::max(1.0, std::fabs(p.scale)) * (1 + gamma_dot) *
                         (1 + unit_roundoff(s_format));
  return !(largest < max_finite(s_format));
}

// Q rounded to Q8_0 as ggml's quantize_row_q8_0_ref does (SPEC 4.1), row
// (b, h, i): each block of 32 gets the scale d_b = (its largest |q_t|) /
// 127, computed in f32 and stored as f16, and q_t becomes n_t = round(q_t /
// d) times the stored scale. The integer errs by half a step, d_b / 2 (f32's
// 2^-23 relative in d and in q_t / d lies inside the slack below); the f16
// scale is d within 2^-11 relative, which moves the value by 2^-11 d |n_t|
// <= 2^-11 |q_t| + 2^-12 d_b since |n_t| <= |q_t| / d + 1/2; 2^-10 d_b
// holds that 2^-12 d_b and the f32 roundings; below f16's normal range the
// scale's absolute error 2^-25 times |n_t| <= 127 is under 2^-18. So
// w_t = (1/2 + 2^-10) d_b(t) + 2^-11 |q_t| + 2^-18. `exact` becomes false
// when the quantizer changes the row (a row already in q8_0 loses
// nothing); returns true when a block's scale is past f16's largest finite
// (an infinite scale: beyond the declared precision). A last partial block
// (dk no multiple of 32) is its own block.
bool q8_0_row_weights(const Problem& p, int64_t b, int64_t h, int64_t i, double qd,
                      std::vector<double>& w, bool& exact) {
  std::vector<double> row(static_cast<size_t>(p.dk));
  for (int64_t e = 0; e < p.dk; ++e) row[static_cast<size_t>(e)] = p.q.at(b, h, i, e) * qd;
  std::vector<double> rounded = row;
  round_row_to_blocks(DType::q8_0, rounded);
  exact = rounded == row;
  w.assign(row.size(), 0.0);
  bool overflows = false;
  for (size_t start = 0; start < row.size(); start += kBlockValues) {
    const size_t end = std::min(row.size(), start + static_cast<size_t>(kBlockValues));
    double amax = 0;
    for (size_t t = start; t < end; ++t) amax = std::max(amax, std::fabs(row[t]));
    const double d_b = amax / 127;
    if (!std::isfinite(round_to(DType::f16, d_b))) overflows = true;
    for (size_t t = start; t < end; ++t)
      w[t] = (0.5 + 0x1p-10) * d_b + 0x1p-11 * std::fabs(row[t]) + 0x1p-18;
  }
  return overflows;
}

}  // namespace

double gamma(double n, double u) {
  const double nu = n * u;
  return nu >= 1 ? std::numeric_limits<double>::infinity() : nu / (1 - nu);
}

namespace {

// The terms of a row of n allowed keys (plus the sink's, `sink`) that
// depend on n alone, whatever the values: gamma_n for the n terms of l,
// and eps, the error of each weight's exponentials: each exp errs by e
// ulps = 2e u, plus the rounding of its argument and of its use (2u),
// (2e + 2) u per exp, and an online softmax takes 1 + r of them per weight
// (r rescales, one per block after the first), plus u_p for the cast of P.
// All in the softmax stage's format (SPEC 4.1: exp_ulps counts its ulps;
// P is not cast when p_cast is that format).
//
// And the P.V accumulator's (SPEC 4.1 pv_accum), gamma_pv for its n
// updates: in the softmax format (the version 1 reading) it is gamma_n
// itself. In another format each update p_j v_j is computed in softmax_accum
// (u_w = u_sm) and then added in pv_accum (u_pv): (1 + u_w)(1 + u_pv)^n - 1
// <= gamma(n, u_pv + u_w). Its rescales (an online kernel multiplies the
// accumulator by exp(m_old - m_new) r times) round in pv_accum: r u_pv
// relative to the sum, `pv_rescale`; where P is cast to pv_accum (ggml on
// ARM rounds the weight and the rescale factor to f16 before the update),
// the factor's own rounding is r u_pv more. In the softmax format those
// roundings are eps's "+ 2" (the rounding of each exp's use), as before.
struct LengthTerms {
  double gamma_n, eps, gamma_pv, pv_rescale;
};

double rescales(double n, const PrecisionTraits& t) {
  return t.key_block > 0 ? std::ceil(n / static_cast<double>(t.key_block)) - 1 : 0.0;
}

LengthTerms length_terms(double n, bool sink, const PrecisionTraits& t) {
  const DType f_sm = t.softmax_format(), f_pv = t.pv_format();
  const double u_sm = unit_roundoff(f_sm);
  // P.V in another format rounds each weight once more; no cast, no term.
  const double u_p = t.p_cast == f_sm ? 0.0 : unit_roundoff(t.p_cast);
  const double r = rescales(n, t);
  const double e = t.exp_ulps;  // in double: 2e + 2 must not wrap for huge declarations
  const double count = n + (sink ? 1 : 0);
  LengthTerms l{gamma(count, u_sm), (2 * e + 2) * (1 + r) * u_sm + u_p, 0, 0};
  if (f_pv == f_sm) {
    l.gamma_pv = l.gamma_n;
  } else {
    const double u_pv = unit_roundoff(f_pv);
    l.gamma_pv = gamma(count, u_pv + u_sm);
    l.pv_rescale = r * u_pv * (t.p_cast == f_pv ? 2 : 1);
  }
  return l;
}

// a_j (e^{D_j} - 1), the most weight j moves before the normalisation under
// a logit error |d_j| <= D_j (see the top), from a_j = exp(log_a) in double:
// e^{log_a + D_j}, an upper bound, where a_j underflowed or e^{D_j} would
// overflow.
double weight_change(double a, double log_a, double D) {
  return a > 0 && D < 700 ? a * std::expm1(D) : std::exp(log_a + D);
}

// SPEC 4.1: the first-order limit per stage: eps and gamma_n of the
// softmax, gamma_n + r u_pv of the P.V accumulator (an f16 accumulator
// rescaled at every key passes it at about 100 keys). gamma_{dk+2} of the
// scores enters through D_j and the limit on sum_j a_j D_j (it is a
// rigorous bound whatever its size while (dk + 2) u < 1; a bf16 dot
// product of 64 terms has gamma 0.35 and is judged, as in version 1, when
// its values keep sum a_j D_j small).
bool beyond_first_order(const LengthTerms& l) {
  return l.gamma_n > kFirstOrderLimit || l.eps > kFirstOrderLimit ||
         l.gamma_pv + l.pv_rescale > kFirstOrderLimit;
}

// The coefficients of a dense problem's analysis that every row shares:
// each stage's unit roundoff and underflow unit, the scores' storage, the
// descales' roundings and Q's rounding (stage_units derives each).
struct StageUnits {
  double u_sc = 0, u_sm = 0, u_div = 0, u_cap = 0, u_o = 0, e = 0;
  double eta_a = 0, eta_pv = 0, eta_p = 0, eta_o = 0;
  double gamma_dot = 0;
  DType s_format = DType::f64;
  double u_s = 0, eta_s = 0, s_carried = 0;
  bool descaled = false;
  double descale_logit = 0, descale_out = 0, vd = 1, eta_products = 0, descale_out_eta = 0;
  std::optional<DType> q_format;
  bool q_blocks = false;
  double u_qc = 0, eta_qc = 0, qd = 1, kd = 1;
};

// SPEC 4.1's units by stage for `p` under `t` (at T^L with `at_limit`).
StageUnits stage_units(const Problem& p, const PrecisionTraits& t, bool at_limit) {
  StageUnits s;
  // Each stage's unit roundoff (SPEC 4.1; a stage not declared is accum,
  // so a declaration without stages gives version 1's terms exactly): the
  // q.k sums, the softmax (scale, max, exp, l, rescales) and the division
  // by l in the format the P.V accumulator or the softmax uses, whichever
  // is coarser (the division may be done in either: ggml converts its f16
  // accumulator to f32 first, others divide in place).
  s.u_sc = unit_roundoff(t.score_format());
  s.u_sm = unit_roundoff(t.softmax_format());
  s.u_div = std::max(s.u_sm, unit_roundoff(t.pv_format()));
  // A softcap's tanh, product and division are charged to whichever stage
  // does them, so to the coarser of the two.
  s.u_cap = std::max(s.u_sc, s.u_sm);
  // The output is rounded to its format. When that is the accumulation
  // format the cast is exact, and u_o then pays for the oracle's own
  // rounding of the exact value to the double it reports (|c - fl(c)| <=
  // 2^-53 |c| <= u_o |c|).
  s.u_o = unit_roundoff(p.dtype);
  s.e = t.exp_ulps;
  // Underflow, where relative bounds stop holding: a value rounded below the
  // normal range errs by up to half the smallest subnormal of its format;
  // in a format declared flushing (ftz_formats, or flush_to_zero for all),
  // an exp result or a product below twice the smallest normal may become
  // 0 (SPEC 4), an error below twice the smallest normal. eta_p: each
  // weight or P element, in the format P is kept in (the exp's result in
  // the accumulation format, then the cast's when P is cast); eta_a: each
  // product a_j v_j (or p_j v_j) of the weighted sum; eta_o: the output.
  // An unnormalised p_j = exp(s_j - m) flushed to 0 errs by eta in p_j and
  // eta / l <= eta in a_j (l >= 1), so eta_p bounds both.
  // eta_a is the softmax format's (exp results, weights), eta_pv the P.V
  // accumulator's (the products a_j v_j and their sum; its own flush bit
  // when pv_accum is declared, SPEC 4.1).
  s.eta_a = underflow_unit(t.softmax_format(), t.flushes(kFtzAccum));
  s.eta_pv = underflow_unit(t.pv_format(), t.flushes(kFtzPvAccum));
  s.eta_p = std::max(s.eta_a, underflow_unit(t.p_cast, t.flushes(kFtzPCast)));
  s.eta_o = underflow_unit(p.dtype, t.flushes(kFtzOut));
  // A dot product of dk terms costs gamma_dk; one more rounding for sigma
  // itself in the accumulation format and one for the product by sigma.
  s.gamma_dot = at_limit ? std::min(gamma(static_cast<double>(p.dk) + 2, s.u_sc), kFirstOrderLimit)
                         : gamma(static_cast<double>(p.dk) + 2, s.u_sc);
  // Scores stored in another format (s_cast, SPEC 1.1 "score storage"): 0
  // when S stays in the accumulation format, whose roundings the terms
  // above already count.
  s.s_format = t.s_cast_format();
  s.u_s = s.s_format == t.score_format() ? 0.0 : unit_roundoff(s.s_format);
  // Its underflow (s_cast_logit_error): no ftz bit names the score format;
  // the store is a result of the score arithmetic, so it flushes where the
  // accumulation format does.
  s.eta_s = underflow_unit(s.s_format, t.flushes(kFtzAccum));
  s.s_carried =
      std::max(1.0, std::fabs(p.scale * (p.descale ? p.descale->q * p.descale->k : 1.0)));
  // Version 2 terms (see the top of this file).
  s.descaled = p.descale.has_value();
  // Roundings of |t_j| and |c| the descales cost (see the top).
  const auto unrepresentable = [&](double x) {
    return representable(t.score_format(), x) ? 0.0 : 1.0;
  };
  s.descale_logit =
      s.descaled ? 3 + unrepresentable(p.descale->q) + unrepresentable(p.descale->k) : 0.0;
  s.descale_out = s.descaled ? 2 + unrepresentable(p.descale->v) : 0.0;
  // Logical values of V (see the top): vd multiplies every stored v_j, and
  // errors of underflowing products of the stored v_j (n eta_a) with it,
  // when vd > 1; below the normal range the descale's two roundings of the
  // output are absolute, 2 eta_a.
  s.vd = s.descaled ? p.descale->v : 1.0;
  s.eta_products = s.eta_pv * std::max(1.0, std::fabs(s.vd));
  s.descale_out_eta = s.descaled ? 2 * std::max(s.eta_a, s.eta_pv) : 0.0;
  // Q rounded before q.k (SPEC 4.1 q_cast): a relative u_qc of each logical
  // q_t (after its descale), which the sum carries to u_qc S_j, and below
  // the format's normal range an absolute eta_qc per element, carried by
  // |sigma| |k_jt| (logical k): D_j += u_qc S_j + |sigma| eta_qc sum_t |k_jt|.
  // A row whose Q is already in the format loses nothing (no term), and a
  // row with an element past the format's largest finite rounds to an
  // infinity: beyond the declared precision.
  // Q8_0 (SPEC 4.1): w_t of q8_0_row_weights, D_j += |sigma| sum_t |k_jt| w_t.
  s.q_format = t.q_cast_format(combo_of(p).kv);
  s.q_blocks = s.q_format == DType::q8_0;
  s.u_qc = s.q_format && !s.q_blocks ? unit_roundoff(*s.q_format) : 0.0;
  s.eta_qc = s.q_format && !s.q_blocks ? underflow_unit(*s.q_format, false) : 0.0;
  s.qd = s.descaled ? p.descale->q : 1.0;
  s.kd = s.descaled ? p.descale->k : 1.0;
  return s;
}

// One query row (b, h, i) of K/V head g, and the oracle's m, l and n there.
struct Row {
  int64_t b = 0, h = 0, i = 0, g = 0;
  size_t row = 0;
  double m = 0, l = 0, n = 0;
};

// The length terms of a row of n allowed keys (length_terms); T^L
// (at_limit): each first-order quantity above the limit taken at the limit
// (SPEC 2, AsAccurateAsBaseline).
LengthTerms row_length_terms(double n, bool sinks, const PrecisionTraits& t, bool at_limit) {
  // l sums n exponentials, and the sink's; eps: each weight's
  // exponentials (length_terms).
  LengthTerms terms = length_terms(n, sinks, t);
  const auto clamp = [at_limit](double x) { return at_limit ? std::min(x, kFirstOrderLimit) : x; };
  if (at_limit) {
    terms.gamma_n = clamp(terms.gamma_n);
    terms.eps = clamp(terms.eps);
    const double pv = terms.gamma_pv + terms.pv_rescale;
    if (pv > kFirstOrderLimit) {
      // gamma is infinite from n u >= 1 (an f16 accumulator past
      // about 2000 keys): all of it is then the limit, and scaling
      // inf by L / inf would give NaN.
      const bool unbounded = std::isinf(terms.gamma_pv);
      terms.gamma_pv = unbounded ? kFirstOrderLimit : terms.gamma_pv * (kFirstOrderLimit / pv);
      terms.pv_rescale = unbounded ? 0.0 : terms.pv_rescale * (kFirstOrderLimit / pv);
    }
  }
  return terms;
}

// Q's rounding of one row (stage_units): whether the row's Q is exact in
// the q_cast format or overflows it, Q8_0's w_t, and sum_t |kd k_jt| of
// the row's K/V head where Q is rounded (kept while the head is the same).
struct QRounding {
  bool exact = true, overflows = false;
  std::vector<double> weight;     // [t]: w_t of the row, for a Q8_0 q_cast
  std::vector<double> k_abs_sum;  // [j]: sum_t |kd k_jt| of the K/V head, when q is rounded
  int64_t k_abs_of = -1;
};

void round_q_of_row(const Problem& p, const StageUnits& s, const Row& r, QRounding& q) {
  q.exact = true;
  q.overflows = false;
  if (s.q_blocks) {
    q.overflows = q8_0_row_weights(p, r.b, r.h, r.i, s.qd, q.weight, q.exact);
  } else if (s.q_format) {
    for (int64_t d = 0; d < p.dk; ++d) {
      const double x = p.q.at(r.b, r.h, r.i, d) * s.qd;
      if (!(std::fabs(x) <= max_finite(*s.q_format))) q.overflows = true;
      if (!representable(*s.q_format, x)) q.exact = false;
    }
  }
  if (s.q_format && !s.q_blocks) {
    if (!q.exact && q.k_abs_of != r.b * p.kv_heads + r.g) {
      q.k_abs_sum.assign(static_cast<size_t>(p.tk), 0.0);
      for (int64_t j = 0; j < p.tk; ++j)
        for (int64_t d = 0; d < p.dk; ++d)
          q.k_abs_sum[static_cast<size_t>(j)] += std::fabs(p.k.at(r.b, r.g, j, d) * s.kd);
      q.k_abs_of = r.b * p.kv_heads + r.g;
    }
  }
}

// The logit errors of one row as weight changes: a_j (e^{D_j} - 1) per key
// (in aD, see the top), the sink's, their sum, and whether a score may
// overflow the s_cast format.
struct LogitErrors {
  double sum_aD = 0;
  bool overflows = false;
  double a_sink = 0, aD_sink = 0;
};

LogitErrors logit_errors(const Problem& p, const OracleResult& o, const StageUnits& s,
                         const Row& r, const QRounding& q, std::vector<double>& aD) {
  const int64_t b = r.b, h = r.h, i = r.i, g = r.g;
  const double m = r.m;
  LogitErrors le;
  for (int64_t j = 0; j < p.tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;
    const size_t w = weight_index(p, b, h, i, j);
    const double sc = o.scores[w];
    // Logit error: the scaled dot product, plus the subtraction of the
    // max and the bias addition, each one rounding of a value bounded
    // by |s_j| + |m| (4 roundings covers subtract, add, and the
    // re-association of either when an implementation folds them).
    double d = s.gamma_dot * o.abs_dot[w] + 4 * s.u_sm * (std::fabs(sc) + std::fabs(m));
    if (!q.exact && s.q_blocks) {
      double sum = 0;
      for (int64_t e = 0; e < p.dk; ++e)
        sum += std::fabs(p.k.at(b, g, j, e) * s.kd) * q.weight[static_cast<size_t>(e)];
      d += std::fabs(p.scale) * sum;
    } else if (!q.exact) {
      d += s.u_qc * o.abs_dot[w] +
           std::fabs(p.scale) * s.eta_qc * q.k_abs_sum[static_cast<size_t>(j)];
    }
    const double capped = std::fabs(sc - p.bias_at(b, h, i, j));  // |c tanh(t / c)|, or |t|
    if (p.softcap > 0) {
      // tanh within e ulps (an ulp is at most 2u of the value: 2e u),
      // the product by c one rounding, and the division t / c one
      // rounding whose effect through c tanh'(x) is at most
      // u |c tanh(x)| because x sech^2 x <= tanh x.
      d += (2 * s.e + 2) * s.u_cap * capped;
    }
    if (s.u_s > 0) {
      d += s_cast_logit_error(p.softcap, capped, std::fabs(sc), s.u_s, s.eta_s, s.s_carried);
      if (scores_may_overflow(p, b, h, i, j, s.s_format, s.gamma_dot)) le.overflows = true;
    }
    if (s.descaled) d += s.descale_logit * s.u_sc * capped;  // the descales' products
    const double ad = weight_change(o.weights[w], sc - o.lse[r.row], d);
    aD[static_cast<size_t>(j)] = ad;
    le.sum_aD += ad;
  }
  // The sink: its weight and the logit error of its subtraction of
  // the max (its logit itself is exact).
  if (!p.sink.empty()) {
    const double z = p.sink[static_cast<size_t>(h)];
    le.a_sink = std::exp(z - o.lse[r.row]);
    le.aD_sink =
        weight_change(le.a_sink, z - o.lse[r.row], 4 * s.u_sm * (std::fabs(z) + std::fabs(m)));
    le.sum_aD += le.aD_sink;
  }
  return le;
}

// The per-row buffers of the output's sums, and V of the current K/V head
// in logical values, contiguous [j][d] (kept while the head is the same).
struct OutputSums {
  std::vector<int64_t> keys;
  std::vector<double> a_row, aD_row;
  std::vector<double> A_row, spread_row, sum_abs_v_row;
  std::vector<double> vs;
  int64_t vs_of = -1;
};

// The output's bound of one row: the logit errors' spread, the sums of
// P.V and l, the division, the cast, the serving terms and underflow.
void output_tolerances(const Problem& p, const OracleResult& o, const PrecisionTraits& t,
                       const StageUnits& s, const Row& r, const LengthTerms& terms, double N,
                       const LogitErrors& le, const std::vector<double>& aD, OutputSums& x,
                       Tolerances& tol) {
  const int64_t b = r.b, h = r.h, i = r.i;
  const double n = r.n;
  const double gamma_n = terms.gamma_n;
  const double eps = terms.eps;
  // The P.V accumulator's rescales below its normal range (SPEC 4.1):
  // one eta_pv each, when it is not the softmax's format (there the n
  // products' eta already is version 1's term).
  const double pv_rescales = t.pv_format() != t.softmax_format() ? rescales(n, t) : 0.0;

  // The row's allowed keys, their weights and a_j D_j, gathered once:
  // at real sizes this loop is the tolerance's cost.
  x.keys.clear();
  x.a_row.clear();
  x.aD_row.clear();
  for (int64_t j = 0; j < p.tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;
    const double a = o.weights[weight_index(p, b, h, i, j)];
    x.keys.push_back(j);
    x.a_row.push_back(a);
    x.aD_row.push_back(aD[static_cast<size_t>(j)]);
  }
  // Sums over the keys, every d at once (the inner loop over d is
  // contiguous and free of loop-carried dependences: it vectorises,
  // each sum still taken in key order).
  const double* c_row = &o.out[out_index(p, b, h, i, 0)];
  x.A_row.assign(static_cast<size_t>(p.dv), 0.0);
  x.spread_row.assign(static_cast<size_t>(p.dv), 0.0);
  x.sum_abs_v_row.assign(static_cast<size_t>(p.dv), 0.0);
  for (size_t k = 0; k < x.keys.size(); ++k) {
    const double* vj = &x.vs[static_cast<size_t>(x.keys[k] * p.dv)];
    const double a = x.a_row[k], aDk = x.aD_row[k];
    double* __restrict Ad = x.A_row.data();
    double* __restrict Sd = x.spread_row.data();
    double* __restrict Vd = x.sum_abs_v_row.data();
    for (int64_t d = 0; d < p.dv; ++d) {
      Ad[d] += a * std::fabs(vj[d]);
      Sd[d] += aDk * std::fabs(vj[d] - c_row[d]);
      Vd[d] += std::fabs(vj[d]);
    }
  }
  for (int64_t d = 0; d < p.dv; ++d) {
    const double c = c_row[d];
    const double A = x.A_row[static_cast<size_t>(d)];
    const double spread = x.spread_row[static_cast<size_t>(d)];
    const double sum_abs_v = x.sum_abs_v_row[static_cast<size_t>(d)];
    // The sink's spread term a D |0 - c|, and the descale's 2 u_a |c| (3 with vd rounded)
    // and 2 eta_a (see the top).
    const double serving_terms =
        le.aD_sink * std::fabs(c) + s.descale_out * s.u_div * std::fabs(c) + s.descale_out_eta;
    // gamma_n A: the n products and sums of P.V; (gamma_n + 2 u_a) |c|:
    // the sum l and the division by it (or the weights' own rounding)
    // and one more for either order; u_o |c|: the output rounding.
    // Underflow: SPEC 4 writes eta_p sum |v_j| / l for unnormalised P;
    // an implementation that normalises first rounds a_j = p_j / l
    // itself, so the / l is dropped (l >= 1: only wider), and each of
    // the n products can underflow on its own (n eta_a). Without the
    // latter a correct f32 kernel exceeded the bound on outputs near
    // 1e-42. With a v descale those n products may be of the stored
    // v and scaled by vd afterwards (eta_products, see the top).
    tol.out[out_index(p, b, h, i, d)] =
        kSecondOrderFactor *
        (spread + serving_terms + (eps + N) * (A + std::fabs(c)) +
         (terms.gamma_pv + terms.pv_rescale) * A + (gamma_n + 2 * s.u_div + s.u_o) * std::fabs(c) +
         s.eta_p * sum_abs_v + (n + pv_rescales) * s.eta_products + s.eta_o);
  }
}

// The bounds of one row's weights, its sink's weight and its lse.
void weight_and_lse_tolerances(const Problem& p, const OracleResult& o, const StageUnits& s,
                               const Row& r, const LengthTerms& terms, double N,
                               const LogitErrors& le, const std::vector<double>& aD,
                               Tolerances& tol) {
  const int64_t b = r.b, h = r.h, i = r.i;
  const double gamma_n = terms.gamma_n;
  const double eps = terms.eps;
  const double sum_aD = le.sum_aD;
  // Weights: the logit errors of the row, the exps, the sum and the
  // division; underflow as for the output, the / l of SPEC 4's
  // eta_p / l dropped for implementations that round a_j = p_j / l.
  // plugin.h lets an implementation return P before or after its
  // p_cast: u_p (in eps) and eta_p are charged to every weight, so
  // both pass, and a weight before the cast uses less of its budget.
  for (int64_t j = 0; j < p.tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;  // masked: exactly 0
    const size_t w = weight_index(p, b, h, i, j);
    const double a = o.weights[w];
    tol.weights[w] =
        kSecondOrderFactor *
        (aD[static_cast<size_t>(j)] + a * (sum_aD + eps + N + gamma_n + 2 * s.u_sm + s.u_o) +
         s.eta_p + s.eta_a);
  }
  // The sink's weight, as any weight (for the backward's dsink).
  if (!p.sink.empty()) {
    tol.sink_weight[r.row] =
        kSecondOrderFactor *
        (le.aD_sink + le.a_sink * (sum_aD + eps + N + gamma_n + 2 * s.u_sm + s.u_o) + s.eta_p +
         s.eta_a);
  }
  // lse = m + log l: the logits' weighted error, the exps and the sum
  // inside the log (relative errors of l become absolute ones of
  // log l), and two roundings (log, addition) of |lse|.
  const double lse = o.lse[r.row];
  tol.lse[r.row] = kSecondOrderFactor * (sum_aD + eps + gamma_n + 2 * s.u_sm * std::fabs(lse));
}

// The buffers every row reuses.
struct RowScratch {
  std::vector<double> aD;  // [j]: a_j (e^{D_j} - 1), see the top
  QRounding q;
  OutputSums sums;
};

// One non-empty row: its length terms, Q's rounding and logit errors, then
// either ill-conditioning or the bounds of its outputs, weights and lse.
void row_tolerances(const Problem& p, const OracleResult& o, const PrecisionTraits& t,
                    const StageUnits& s, bool at_limit, const Row& r, RowScratch& x,
                    Tolerances& tol) {
  const LengthTerms terms = row_length_terms(r.n, !p.sink.empty(), t, at_limit);
  // Q's rounding, this row (see above).
  round_q_of_row(p, s, r, x.q);
  LogitErrors le = logit_errors(p, o, s, r, x.q, x.aD);
  // A normalisation through lse (p_j = exp(s_j - lse)) rounds lse; its
  // error is common to all weights and not cancelled by a division.
  // Four roundings of |m| + log l: the log, the addition, and the
  // subtraction s_j - lse with its re-association.
  const double N = 4 * s.u_sm * (std::fabs(r.m) + std::log(r.l));
  // An infinity in S or Q is beyond any bound; at the limit (T^L) the
  // logit errors are scaled down to sum a_j D_j = L, the others taken
  // at L above.
  const bool beyond = le.sum_aD > kFirstOrderLimit || beyond_first_order(terms);
  if (le.overflows || x.q.overflows || (beyond && !at_limit)) {
    tol.ill_conditioned[r.row] = 1;
    ++tol.ill_conditioned_rows;
    return;
  }
  if (at_limit && le.sum_aD > kFirstOrderLimit) {
    const double shrink = kFirstOrderLimit / le.sum_aD;
    for (int64_t j = 0; j < p.tk; ++j) x.aD[static_cast<size_t>(j)] *= shrink;
    le.aD_sink *= shrink;
    le.sum_aD = kFirstOrderLimit;
  }
  output_tolerances(p, o, t, s, r, terms, N, le, x.aD, x.sums, tol);
  weight_and_lse_tolerances(p, o, s, r, terms, N, le, x.aD, tol);
}

// The tolerances of a dense problem (a varlen one's sequence).
Tolerances tolerances_dense(const Problem& p, const OracleResult& o,
                            const PrecisionTraits& t, bool at_limit) {
  Tolerances tol;
  tol.out.assign(o.out.size(), 0.0);
  tol.weights.assign(o.weights.size(), 0.0);
  tol.lse.assign(o.lse.size(), 0.0);
  tol.ill_conditioned.assign(o.lse.size(), 0);
  const StageUnits s = stage_units(p, t, at_limit);
  if (!p.sink.empty()) tol.sink_weight.assign(o.lse.size(), 0.0);

  RowScratch x;
  x.aD.resize(static_cast<size_t>(p.tk));
  std::vector<double>& vs = x.sums.vs;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      if (x.sums.vs_of != b * p.kv_heads + g) {
        vs.resize(static_cast<size_t>(p.tk * p.dv));
        for (int64_t j = 0; j < p.tk; ++j)
          for (int64_t d = 0; d < p.dv; ++d)
            vs[static_cast<size_t>(j * p.dv + d)] = p.v.at(b, g, j, d) * s.vd;  // logical
        x.sums.vs_of = b * p.kv_heads + g;
      }
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        if (o.row_empty[row]) continue;  // exact zeros are compared exactly
        const Row r{b, h, i, g, row, o.row_max[row], o.row_sum[row],
                    static_cast<double>(o.row_allowed[row])};
        row_tolerances(p, o, t, s, at_limit, r, x, tol);
      }
    }
  }
  return tol;
}

}  // namespace

Tolerances tolerances(const Problem& p, const OracleResult& o, const PrecisionTraits& t,
                      bool at_limit) {
  if (!p.varlen()) return tolerances_dense(p, o, t, at_limit);
  if (o.sequences.size() != static_cast<size_t>(p.batch)) {
    throw std::invalid_argument(
        "tolerances: a varlen problem needs the oracle's per-sequence results (oracle(p))");
  }
  Tolerances tol;
  tol.out.assign(o.out.size(), 0.0);
  tol.weights.assign(o.weights.size(), 0.0);
  tol.lse.assign(o.lse.size(), 0.0);
  tol.ill_conditioned.assign(o.lse.size(), 0);
  // Packed queries have no weights.
  const auto judge = [&](const Problem& sp, const OracleResult& os, const SequencePlacement& at) {
    const Tolerances ts = tolerances_dense(sp, os, t, at_limit);
    tol.ill_conditioned_rows += ts.ill_conditioned_rows;
    at.rows(tol.lse, ts.lse);
    at.rows(tol.ill_conditioned, ts.ill_conditioned);
    at.query_rows(tol.out, ts.out, p.dv);
    if (!tol.weights.empty()) at.scores(tol.weights, ts.weights);
  };
  for_each_sequence(p, o, judge);
  return tol;
}

bool overflows_declared_formats(const Problem& p, const PrecisionTraits& t) {
  if (p.varlen()) {
    for (int64_t b = 0; b < p.batch; ++b)
      if (p.seq_tq(b) > 0 && overflows_declared_formats(sequence_problem(p, b), t)) return true;
    return false;
  }
  const std::optional<DType> q_format = t.q_cast_format(combo_of(p).kv);
  const double qd = p.descale ? p.descale->q : 1.0;
  if (q_format == DType::q8_0) {
    std::vector<double> weights;
    bool exact = true;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          if (q8_0_row_weights(p, b, h, i, qd, weights, exact)) return true;
  } else if (q_format) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t d = 0; d < p.dk; ++d)
            if (!(std::fabs(p.q.at(b, h, i, d) * qd) <= max_finite(*q_format))) return true;
  }
  const DType s_format = t.s_cast_format();
  if (s_format == t.score_format()) return false;
  const double gamma_dot = gamma(static_cast<double>(p.dk) + 2, unit_roundoff(t.score_format()));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j)
          if (p.allowed(b, h, i, j) && scores_may_overflow(p, b, h, i, j, s_format, gamma_dot))
            return true;
  return false;
}

bool beyond_first_order_by_length(const Problem& p, const PrecisionTraits& t) {
  if (p.varlen()) return false;
  const bool sinks = !p.sink.empty();
  // The shortest row beyond (both terms grow with n), if any up to tk.
  int64_t shortest = -1;
  for (int64_t n = 0; n <= p.tk && shortest < 0; ++n)
    if (beyond_first_order(length_terms(static_cast<double>(n), sinks, t))) shortest = n;
  if (shortest < 0) return false;
  // A row without keys nor sink is empty: compared exactly, never bounded.
  const int64_t need = std::max<int64_t>(shortest, sinks ? 0 : 1);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        int64_t n = 0;
        if (n >= need) return true;
        for (int64_t j = 0; j < p.tk; ++j)
          if (p.allowed(b, h, i, j) && ++n >= need) return true;
      }
  return false;
}

}  // namespace attncheck
