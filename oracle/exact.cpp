// The oracle's slow path: MPFR interval arithmetic with exact scores.
//
// Exact scores. A product of two doubles has at most 106 significant bits,
// so MPFR holds it exactly at 106 bits whatever the exponents (MPFR's
// exponent range is far wider than double's: nothing overflows or
// underflows, subnormal inputs included). The sum of a row's dk products is
// then done by mpfr_sum into a variable whose precision covers every bit
// from the highest product's leading bit to the lowest product's last bit
// plus carries, so it is exact. Multiplying by the scale (another 53 bits)
// and adding the bias are exact the same way. Without softcap the score
// s_ij is therefore an exact binary number, and so is s_ij - m.
//
// Intervals. Everything after the scores is an interval [lo, hi] of MPFR
// numbers at precision P, lo rounded down and hi rounded up by every
// operation (exp, log and tanh are monotone, MPFR rounds them correctly in
// the direction asked), so the exact value always lies inside. A reported
// double is decided when lo and hi round to the same double: rounding to
// nearest is monotone, so every value in between, the exact one included,
// rounds to it too. Undecided values are retried at 256, 512 and 2400 bits
// (Ziv's strategy); 2400 bits hold any exact sum of doubles, so the
// rational cases below become exact there at the latest.
//
// Rational cases. A midpoint between two doubles is a number of 54
// significant bits: if the exact result is one, no interval of positive
// width around it can be decided, at any precision. Where the exact result
// is rational the interval is degenerate instead: a key at x = s - m = 0
// (a row whose allowed scores are all equal, or a single allowed key) has
// exp(x) = 1 exactly, the row sum is exactly n, the weights are 1 / n, the
// lse is m + log 1 = m exactly, and the output's numerator is an exact sum
// of values once P covers their bits, so a mean that happens to be a
// midpoint comes out as the point interval [mean, mean], and MPFR rounds
// it with ties to even. (By the Lindemann-Weierstrass theorem, without
// softcap the weights are rational only in these rows; an output can also
// be rational when every class of equal scores has the same mean of
// values: that case is computed exactly by class_mean below.)
//
// Ties that intervals cannot settle, and how each is settled instead:
//  - A rational value at a midpoint whose interval never collapses: the
//    gradients of equal-score rows, where a = 1/n enters every product
//    (scale times a small rational often has exactly 54 bits). They are
//    recomputed in GMP rationals (rational_gradients) and rounded exactly.
//  - An irrational value within 2^-2400 of a midpoint, where the interval
//    has the midpoint as an end: lse = m + log l when the other keys are
//    more than ~1600 below the maximum m (l rounds to 1) and m is a
//    midpoint; dK = (rational midpoint) + sech^2-weighted terms of
//    e^-thousands under softcap. Irrationality (Lindemann-Weierstrass,
//    argued at each place) puts the value in the OPEN interval, and
//    decide_open rounds it away from the midpoint end.
//  - Sums of transcendental terms that cancel exactly, and softcap rows
//    with distinct scores: no argument excludes a tie there (Schanuel's
//    conjecture would, for softcap), so if the 2400-bit interval does not
//    decide, the value is reported uncertified. No generated problem of the
//    samples in tests/test_oracle.cpp reaches this.
// What is still undecided after all of this goes into r.uncertified, with
// the nearest double of its interval's lower end as a provisional value.

#include <mpfr.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <memory>
#include <vector>

#include "internal.h"

namespace attncheck::oracle_detail {
namespace {

// An MPFR number that frees itself. Not copyable: the slow path keeps them
// in fixed arrays.
struct Mp {
  mpfr_t x;
  Mp() { mpfr_init2(x, 2); }
  explicit Mp(mpfr_prec_t prec) { mpfr_init2(x, prec); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
  ~Mp() { mpfr_clear(x); }
  mpfr_ptr get() { return x; }
  mpfr_srcptr get() const { return x; }
};

// An enclosure [lo, hi] of an exact real.
struct Iv {
  Mp lo, hi;
  void set_prec(mpfr_prec_t prec) {
    mpfr_set_prec(lo.get(), prec);
    mpfr_set_prec(hi.get(), prec);
  }
  void set_d(double v) {
    mpfr_set_d(lo.get(), v, MPFR_RNDD);
    mpfr_set_d(hi.get(), v, MPFR_RNDU);
  }
  void set_zero() {
    mpfr_set_zero(lo.get(), 1);
    mpfr_set_zero(hi.get(), 1);
  }
};

template <typename T>
std::unique_ptr<T[]> make_array(size_t n) {
  return std::unique_ptr<T[]>(new T[n == 0 ? 1 : n]);
}

// Both ends round to the same double: that double is the correctly rounded
// value of everything inside, the exact result included. Otherwise `out`
// gets the nearest double of the lower end, a provisional value that stays
// flagged as undecided.
bool decide(const Iv& v, double& out) {
  const double lo = mpfr_get_d(v.lo.get(), MPFR_RNDN);
  const double hi = mpfr_get_d(v.hi.get(), MPFR_RNDN);
  if (!(lo == hi)) {
    if (!std::isnan(lo)) out = lo;
    return false;
  }
  out = lo == 0 ? 0.0 : lo;
  return true;
}

// Whether x lies exactly halfway between two adjacent finite doubles.
bool is_midpoint(mpfr_srcptr x) {
  if (!mpfr_number_p(x) || mpfr_zero_p(x)) return false;
  const double a = mpfr_get_d(x, MPFR_RNDD), b = mpfr_get_d(x, MPFR_RNDU);
  if (a == b || !std::isfinite(a) || !std::isfinite(b)) return false;
  // Adjacent doubles: a + b has at most 55 significant bits, exact here.
  Mp mid(128);
  mpfr_set_d(mid.get(), a, MPFR_RNDN);
  mpfr_add_d(mid.get(), mid.get(), b, MPFR_RNDN);
  mpfr_div_2ui(mid.get(), mid.get(), 1, MPFR_RNDN);
  return mpfr_equal_p(x, mid.get());
}

// Rounding of a value x known to lie in the OPEN interval (lo, hi) (or to
// equal lo when lo == hi). Besides the case of decide(), this settles an
// end that is itself a midpoint: x is strictly on one side of it, so every
// candidate rounds away from that end, to the double the other end rounds
// to. Callers must prove x != lo and x != hi (x irrational, or a rational
// that is not representable at the ends' precision).
bool decide_open(mpfr_srcptr lo, mpfr_srcptr hi, double& out) {
  if (mpfr_equal_p(lo, hi)) {
    out = mpfr_get_d(lo, MPFR_RNDN);
    return !std::isnan(out);
  }
  const double dl = mpfr_get_d(lo, MPFR_RNDN), dh = mpfr_get_d(hi, MPFR_RNDN);
  if (std::isnan(dl) || std::isnan(dh)) return false;
  if (dl == dh) {
    out = dl == 0 ? 0.0 : dl;
    return true;
  }
  if (is_midpoint(lo) && mpfr_get_d(lo, MPFR_RNDU) == dh) {
    out = dh;
    return true;
  }
  if (is_midpoint(hi) && mpfr_get_d(hi, MPFR_RNDD) == dl) {
    out = dl;
    return true;
  }
  return false;
}

// A GMP rational that frees itself.
struct Q {
  mpq_t x;
  Q() { mpq_init(x); }
  explicit Q(double d) {
    mpq_init(x);
    mpq_set_d(x, d);  // exact for every finite double
  }
  Q(const Q& o) {
    mpq_init(x);
    mpq_set(x, o.x);
  }
  Q& operator=(const Q& o) {
    mpq_set(x, o.x);
    return *this;
  }
  ~Q() { mpq_clear(x); }
  mpq_ptr get() { return x; }
  mpq_srcptr get() const { return x; }
  bool zero() const { return mpq_sgn(x) == 0; }
};

// The exact rational q correctly rounded to nearest (ties to even). Every
// double and every midpoint between doubles has at most 54 significant
// bits, so when q is not exact at 128 bits it is neither, and no such
// number lies strictly between its two 128-bit neighbours: decide_open
// always settles it.
bool round_rational(const Q& q, double& out) {
  Mp lo(128), hi(128);
  const int t = mpfr_set_q(lo.get(), q.get(), MPFR_RNDD);
  mpfr_set_q(hi.get(), q.get(), MPFR_RNDU);
  if (t == 0) {
    out = mpfr_get_d(lo.get(), MPFR_RNDN);  // the one rounding
    return true;
  }
  return decide_open(lo.get(), hi.get(), out);
}

// Lowest possible bit position of a nonzero x: its exponent minus its
// precision.
mpfr_exp_t low_bit(mpfr_srcptr x) {
  return mpfr_get_exp(x) - static_cast<mpfr_exp_t>(mpfr_get_prec(x));
}

// out = sum_c a[c] * b[c] (or of |a[c] * b[c]|), exactly.
void exact_dot(Mp& out, const double* a, const double* b, size_t n,
               bool absolute, Mp* prods, std::vector<mpfr_ptr>& ptrs) {
  ptrs.clear();
  mpfr_exp_t top = 0, bottom = 0;
  bool finite = true, first = true;
  for (size_t c = 0; c < n; ++c) {
    mpfr_ptr x = prods[c].get();
    mpfr_set_d(x, a[c], MPFR_RNDN);  // exact: 106 >= 53 bits
    mpfr_mul_d(x, x, b[c], MPFR_RNDN);  // exact: 53 + 53 bits
    if (absolute) mpfr_abs(x, x, MPFR_RNDN);
    if (mpfr_zero_p(x)) continue;
    ptrs.push_back(x);
    // NaN and infinities have no exponent: the sum of them is special
    // whatever the precision (a key no row can see may hold them, as
    // --strict's masked keys do; the oracle never reports such a value).
    if (!mpfr_number_p(x)) {
      finite = false;
      continue;
    }
    if (first || mpfr_get_exp(x) > top) top = mpfr_get_exp(x);
    if (first || low_bit(x) < bottom) bottom = low_bit(x);
    first = false;
  }
  if (!finite) {
    mpfr_set_prec(out.get(), 2);
    mpfr_sum(out.get(), ptrs.data(), ptrs.size(), MPFR_RNDN);
    return;
  }
  if (ptrs.empty()) {
    mpfr_set_prec(out.get(), 2);
    mpfr_set_zero(out.get(), 1);
    return;
  }
  // Bits from the lowest to the highest product, plus the carries of n
  // additions.
  const auto carries = static_cast<mpfr_exp_t>(std::bit_width(n)) + 1;
  mpfr_set_prec(out.get(), static_cast<mpfr_prec_t>(top - bottom + carries));
  mpfr_sum(out.get(), ptrs.data(), ptrs.size(), MPFR_RNDN);
}

// out = a + d exactly (out must not be a).
void exact_add_d(Mp& out, const Mp& a, double d) {
  if (d == 0 || mpfr_zero_p(a.get())) {
    mpfr_set_prec(out.get(), std::max<mpfr_prec_t>(mpfr_get_prec(a.get()), 53));
    mpfr_add_d(out.get(), a.get(), d, MPFR_RNDN);
    return;
  }
  if (!mpfr_number_p(a.get()) || !std::isfinite(d)) {  // special: no exponent
    mpfr_set_prec(out.get(), 2);
    mpfr_add_d(out.get(), a.get(), d, MPFR_RNDN);
    return;
  }
  int e = 0;
  std::frexp(d, &e);
  const mpfr_exp_t top = std::max<mpfr_exp_t>(mpfr_get_exp(a.get()), e) + 1;
  const mpfr_exp_t bottom = std::min<mpfr_exp_t>(low_bit(a.get()), e - 53);
  mpfr_set_prec(out.get(), static_cast<mpfr_prec_t>(top - bottom + 1));
  mpfr_add_d(out.get(), a.get(), d, MPFR_RNDN);
}

// Interval operations. Each end is rounded outward.
void iadd(Iv& r, const Iv& a, const Iv& b) {
  mpfr_add(r.lo.get(), a.lo.get(), b.lo.get(), MPFR_RNDD);
  mpfr_add(r.hi.get(), a.hi.get(), b.hi.get(), MPFR_RNDU);
}
void isub(Iv& r, const Iv& a, const Iv& b) {
  mpfr_sub(r.lo.get(), a.lo.get(), b.hi.get(), MPFR_RNDD);
  mpfr_sub(r.hi.get(), a.hi.get(), b.lo.get(), MPFR_RNDU);
}
// r = a * d for an exact double d (r may be a).
void imul_d(Iv& r, const Iv& a, double d) {
  if (d >= 0) {
    mpfr_mul_d(r.lo.get(), a.lo.get(), d, MPFR_RNDD);
    mpfr_mul_d(r.hi.get(), a.hi.get(), d, MPFR_RNDU);
  } else {
    // Swap through a's ends before writing r, which may alias a.
    Mp t(mpfr_get_prec(r.lo.get()));
    mpfr_mul_d(t.get(), a.hi.get(), d, MPFR_RNDD);
    mpfr_mul_d(r.hi.get(), a.lo.get(), d, MPFR_RNDU);
    mpfr_set(r.lo.get(), t.get(), MPFR_RNDD);
  }
}
// r += a * d for an exact double d.
void iadd_mul_d(Iv& r, const Iv& a, double d, Iv& tmp) {
  imul_d(tmp, a, d);
  iadd(r, r, tmp);
}
// r = a * b, general signs (r must not alias a or b).
void imul(Iv& r, const Iv& a, const Iv& b, Mp& t) {
  mpfr_srcptr as[2] = {a.lo.get(), a.hi.get()};
  mpfr_srcptr bs[2] = {b.lo.get(), b.hi.get()};
  bool first = true;
  for (auto x : as) {
    for (auto y : bs) {
      mpfr_mul(t.get(), x, y, MPFR_RNDD);
      if (first || mpfr_less_p(t.get(), r.lo.get()))
        mpfr_set(r.lo.get(), t.get(), MPFR_RNDD);
      mpfr_mul(t.get(), x, y, MPFR_RNDU);
      if (first || mpfr_greater_p(t.get(), r.hi.get()))
        mpfr_set(r.hi.get(), t.get(), MPFR_RNDU);
      first = false;
    }
  }
}
// r = a / l for l > 0 (r must not alias a or l).
void idiv_pos(Iv& r, const Iv& a, const Iv& l) {
  mpfr_div(r.lo.get(), a.lo.get(),
           mpfr_sgn(a.lo.get()) >= 0 ? l.hi.get() : l.lo.get(), MPFR_RNDD);
  mpfr_div(r.hi.get(), a.hi.get(),
           mpfr_sgn(a.hi.get()) >= 0 ? l.lo.get() : l.hi.get(), MPFR_RNDU);
}

// r = sech^2(u) for u in the interval x (r must not alias x): sech is even,
// decreasing in |u|, and 0 < sech <= 1.
void sech2(Iv& r, const Iv& x) {
  mpfr_srcptr a = x.lo.get(), b = x.hi.get();
  if (mpfr_sgn(a) >= 0) {
    mpfr_sech(r.lo.get(), b, MPFR_RNDD);
    mpfr_sech(r.hi.get(), a, MPFR_RNDU);
  } else if (mpfr_sgn(b) <= 0) {
    mpfr_sech(r.lo.get(), a, MPFR_RNDD);
    mpfr_sech(r.hi.get(), b, MPFR_RNDU);
  } else {
    Mp t(mpfr_get_prec(r.lo.get()));
    mpfr_sech(r.lo.get(), a, MPFR_RNDD);
    mpfr_sech(t.get(), b, MPFR_RNDD);
    if (mpfr_less_p(t.get(), r.lo.get())) mpfr_set(r.lo.get(), t.get(), MPFR_RNDD);
    mpfr_set_ui(r.hi.get(), 1, MPFR_RNDU);
  }
  mpfr_sqr(r.lo.get(), r.lo.get(), MPFR_RNDD);
  mpfr_sqr(r.hi.get(), r.hi.get(), MPFR_RNDU);
}

bool row_pending(const Problem& p, const Decided& d, int64_t b, int64_t h,
                 int64_t i) {
  const size_t row = row_index(p, b, h, i);
  if (!d.lse[row]) return true;
  for (int64_t c = 0; c < p.dv; ++c)
    if (!d.out[out_index(p, b, h, i, c)]) return true;
  for (int64_t j = 0; j < p.tk; ++j)
    if (!d.weights[weight_index(p, b, h, i, j)]) return true;
  for (int64_t c = 0; c < (p.dout.empty() ? 0 : p.dk); ++c)
    if (!d.dq[row * static_cast<size_t>(p.dk) + static_cast<size_t>(c)])
      return true;
  return false;
}

bool kv_pending(const Problem& p, const Decided& d, int64_t b, int64_t g) {
  if (p.dout.empty()) return false;
  for (int64_t j = 0; j < p.tk; ++j) {
    for (int64_t c = 0; c < p.dk; ++c)
      if (!d.dk[kv_index(p, b, g, j, c, p.dk)]) return true;
    for (int64_t c = 0; c < p.dv; ++c)
      if (!d.dv[kv_index(p, b, g, j, c, p.dv)]) return true;
  }
  return false;
}

bool group_pending(const Problem& p, int64_t b, int64_t g, const Decided& d) {
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t h = g * group; h < (g + 1) * group; ++h)
    for (int64_t i = 0; i < p.tq; ++i)
      if (row_pending(p, d, b, h, i)) return true;
  return kv_pending(p, d, b, g);
}

constexpr std::array<mpfr_prec_t, 4> kLevels = {128, 256, 512, 2400};

// The computation of one K/V group at one precision.
class Group {
 public:
  Group(const Problem& p, int64_t b, int64_t g, OracleResult& r, Decided& d)
      : p_(p), b_(b), g_(g), r_(r), d_(d),
        tk_(static_cast<size_t>(p.tk)),
        dk_(static_cast<size_t>(p.dk)),
        dv_(static_cast<size_t>(p.dv)),
        kt_(tk_ + (p.sink.empty() ? 0 : 1)),
        grads_(!p.dout.empty()),
        sink_(!p.sink.empty()),
        qd_(p.descale ? p.descale->q : 1.0),
        kd_(p.descale ? p.descale->k : 1.0),
        vd_(p.descale ? p.descale->v : 1.0) {
    // The sink is key tk_ of every row: its score is sink_h, its k and v
    // rows are zeros (SPEC 1.1: a key with value 0 that only the
    // denominator sees), and no weight, dK or dV is reported for it.
    kmat_.assign(kt_ * dk_, 0.0);
    vmat_.assign(kt_ * dv_, 0.0);
    // scale * q_descale * k_descale: three doubles, exact at 3 * 53 bits.
    mpfr_set_prec(eff_scale_.get(), 3 * 53);
    mpfr_set_d(eff_scale_.get(), p.scale, MPFR_RNDN);
    mpfr_mul_d(eff_scale_.get(), eff_scale_.get(), qd_, MPFR_RNDN);
    mpfr_mul_d(eff_scale_.get(), eff_scale_.get(), kd_, MPFR_RNDN);
    for (size_t j = 0; j < tk_; ++j) {
      for (size_t c = 0; c < dk_; ++c)
        kmat_[j * dk_ + c] = p.k.at(b, g, static_cast<int64_t>(j),
                                    static_cast<int64_t>(c));
      for (size_t c = 0; c < dv_; ++c)
        vmat_[j * dv_ + c] = p.v.at(b, g, static_cast<int64_t>(j),
                                    static_cast<int64_t>(c));
    }
    q_.resize(dk_);
    dout_.resize(dv_);
    ok_.assign(kt_, 0);
    prods_ = make_array<Mp>(std::max(dk_, dv_));
    for (size_t c = 0; c < std::max(dk_, dv_); ++c)
      mpfr_set_prec(prods_[c].get(), 106);
    exact_ = make_array<Mp>(kt_);
    s_ = make_array<Iv>(kt_);
    th_ = make_array<Iv>(kt_);
    e_ = make_array<Iv>(kt_);
    a_ = make_array<Iv>(kt_);
    dt_ = make_array<Iv>(kt_);
    f_ = make_array<Iv>(kt_);
    num_ = make_array<Iv>(std::max(dk_, dv_));
    dkacc_ = make_array<Iv>(tk_ * dk_);
    dvacc_ = make_array<Iv>(tk_ * dv_);
    const int64_t group = p.heads / p.kv_heads;
    h0_ = g * group;
    h1_ = h0_ + group;
  }

  // Whether any value of the group is still undecided.
  bool pending() const { return group_pending(p_, b_, g_, d_); }

  // Computes the group at precision prec, storing each value it decides.
  void run(mpfr_prec_t prec, bool diagnostics) {
    set_precision(prec);
    const bool kv = grads_ && kv_pending();
    if (kv) {
      for (size_t x = 0; x < tk_ * dk_; ++x) {
        dkacc_[x].set_prec(prec);
        dkacc_[x].set_zero();
      }
      for (size_t x = 0; x < tk_ * dv_; ++x) {
        dvacc_[x].set_prec(prec);
        dvacc_[x].set_zero();
      }
    }
    for (int64_t h = h0_; h < h1_; ++h)
      for (int64_t i = 0; i < p_.tq; ++i)
        if (diagnostics || kv || row_pending(h, i)) row(h, i, diagnostics);
    if (!kv) return;
    for (size_t j = 0; j < tk_; ++j) {
      const auto jj = static_cast<int64_t>(j);
      for (size_t c = 0; c < dk_; ++c) {
        const size_t x = kv_index(p_, b_, g_, jj, static_cast<int64_t>(c),
                                  p_.dk);
        // dK of the logical k: scale qd sum_i dS_ij q_i.
        imul_d(dkacc_[j * dk_ + c], dkacc_[j * dk_ + c], qd_);
        if (!d_.dk[x]) d_.dk[x] = decide(dkacc_[j * dk_ + c], r_.dk[x]);
      }
      for (size_t c = 0; c < dv_; ++c) {
        const size_t x = kv_index(p_, b_, g_, jj, static_cast<int64_t>(c),
                                  p_.dv);
        if (!d_.dv[x]) d_.dv[x] = decide(dvacc_[j * dv_ + c], r_.dv[x]);
      }
    }
  }

  // Adds to acc[h] the dsink terms sum_i dS_sink(h, i) = -sum_i a_sink
  // sigma_i of every query head h of the group, at precision prec; acc
  // holds one interval per head of the problem.
  void add_dsink(mpfr_prec_t prec, Iv* acc) {
    set_precision(prec);
    for (int64_t h = h0_; h < h1_; ++h) {
      for (int64_t i = 0; i < p_.tq; ++i) {
        if (!forward(h, i, false, false)) continue;  // no real key: dS_sink = 0
        ds_and_sigma(h, i);
        iadd(acc[h], acc[h], dt_[tk_]);
      }
    }
  }

  // Lists what no precision decided.
  void report_undecided() {
    for (int64_t h = h0_; h < h1_; ++h) {
      for (int64_t i = 0; i < p_.tq; ++i) {
        const size_t row = row_index(p_, b_, h, i);
        if (!d_.lse[row]) r_.uncertified.push_back({"lse", {b_, h, i}});
        for (int64_t c = 0; c < p_.dv; ++c)
          if (!d_.out[out_index(p_, b_, h, i, c)])
            r_.uncertified.push_back({"out", {b_, h, i, c}});
        for (int64_t j = 0; j < p_.tk; ++j)
          if (!d_.weights[weight_index(p_, b_, h, i, j)])
            r_.uncertified.push_back({"weights", {b_, h, i, j}});
        if (grads_)
          for (int64_t c = 0; c < p_.dk; ++c)
            if (!d_.dq[row * dk_ + static_cast<size_t>(c)])
              r_.uncertified.push_back({"dq", {b_, h, i, c}});
      }
    }
    if (!grads_) return;
    for (int64_t j = 0; j < p_.tk; ++j) {
      for (int64_t c = 0; c < p_.dk; ++c)
        if (!d_.dk[kv_index(p_, b_, g_, j, c, p_.dk)])
          r_.uncertified.push_back({"dk", {b_, g_, j, c}});
      for (int64_t c = 0; c < p_.dv; ++c)
        if (!d_.dv[kv_index(p_, b_, g_, j, c, p_.dv)])
          r_.uncertified.push_back({"dv", {b_, g_, j, c}});
    }
  }

  // An output that is rational although the row's scores differ: every
  // class of keys with equal scores has the same mean of values r, so
  // o = sum_k exp(s_k) n_k r / sum_k exp(s_k) n_k = r exactly. Exact
  // scores exist only without softcap.
  void class_means() {
    if (p_.softcap > 0) return;
    for (int64_t h = h0_; h < h1_; ++h) {
      for (int64_t i = 0; i < p_.tq; ++i) {
        bool any = false;
        for (int64_t c = 0; c < p_.dv; ++c)
          any |= !d_.out[out_index(p_, b_, h, i, c)];
        if (!any) continue;
        exact_scores(h, i);
        for (int64_t c = 0; c < p_.dv; ++c) {
          const size_t o = out_index(p_, b_, h, i, c);
          if (!d_.out[o]) d_.out[o] = common_class_mean(c, r_.out[o]);
        }
      }
    }
  }

  // Gradients that are exact rationals, computed with GMP rationals.
  //
  // A row whose allowed keys all have the same score (the same exact t and
  // bias under softcap) has weights exactly 1 / n, so with dA_j = dO . v_j
  // (a sum of products of doubles) and S = sum_j dA_j,
  //   dS_j = (dA_j - S / n) / n = (n dA_j - S) / n^2,   dV_j += dO / n,
  // all rational; dT_j = dS_j f with f = sech^2(t / c) under softcap, which
  // is 1 at t = 0 and transcendental otherwise (Lindemann). A gradient is
  // computed here when every term of its sum is such an exact rational, or
  // exactly zero (dO_c = 0 for dV, q_c = 0 or dS_j = 0 for dK, a zero sum
  // for dQ); rounding the exact rational settles even a midpoint (to even).
  // Midpoints are what these rows produce: scale times a small rational
  // often has exactly 54 significant bits, and no interval can decide a
  // value that equals a midpoint. Sums with any other term stay with the
  // interval result: with a transcendental term they are no midpoint.
  void rational_gradients() {
    if (!grads_ || !pending()) return;
    struct RowInfo {
      bool rational = false, f_one = false;
      int64_t n = 0;
      std::vector<uint8_t> ok;
      std::vector<Q> ds;  // dS_j, exact, on rational rows
      Q abs_t;            // |t| of the row's keys (softcap), exact
    };
    const int64_t rows_n = (h1_ - h0_) * p_.tq;
    std::vector<RowInfo> rows(static_cast<size_t>(rows_n));
    Q t, u, nn;
    const Q vdq(vd_);
    for (int64_t h = h0_; h < h1_; ++h) {
      for (int64_t i = 0; i < p_.tq; ++i) {
        RowInfo& ri = rows[static_cast<size_t>((h - h0_) * p_.tq + i)];
        exact_scores(h, i);
        ri.ok = ok_;
        int64_t first = -1;
        bool equal = true;
        for (size_t j = 0; j < tk_; ++j) {
          if (!ok_[j]) continue;
          const auto jj = static_cast<int64_t>(j);
          if (first < 0) {
            first = jj;
          } else if (!mpfr_equal_p(exact_[j].get(), exact_[static_cast<size_t>(first)].get()) ||
                     (p_.softcap > 0 &&
                      p_.bias_at(b_, h, i, jj) != p_.bias_at(b_, h, i, first))) {
            equal = false;
          }
          ++ri.n;
        }
        if (ri.n == 0 || !equal) continue;
        if (sink_) {
          // A sink equal to the scores is one more key, of weight 1 / n
          // and value 0 (dA = 0); any other sink makes the weights
          // transcendental (Lindemann), and so does a softcapped row's.
          if (p_.softcap > 0 ||
              !mpfr_equal_p(exact_[tk_].get(), exact_[static_cast<size_t>(first)].get()))
            continue;
          ++ri.n;
        }
        ri.rational = true;
        ri.f_one = p_.softcap == 0 ||
                   mpfr_zero_p(exact_[static_cast<size_t>(first)].get());
        if (!ri.f_one) {
          mpfr_get_q(ri.abs_t.get(), exact_[static_cast<size_t>(first)].get());
          mpq_abs(ri.abs_t.get(), ri.abs_t.get());
        }
        std::vector<Q> da(tk_);
        Q sum;
        for (size_t j = 0; j < tk_; ++j) {
          if (!ok_[j]) continue;
          for (size_t c = 0; c < dv_; ++c) {
            mpq_set_d(t.get(), p_.dout[out_index(p_, b_, h, i, static_cast<int64_t>(c))]);
            mpq_set_d(u.get(), vmat_[j * dv_ + c]);
            mpq_mul(t.get(), t.get(), u.get());
            mpq_add(da[j].get(), da[j].get(), t.get());
          }
          mpq_mul(da[j].get(), da[j].get(), vdq.get());  // dO . (vd v_j)
          mpq_add(sum.get(), sum.get(), da[j].get());
        }
        mpq_set_si(nn.get(), static_cast<long>(ri.n), 1);
        ri.ds.resize(tk_);
        for (size_t j = 0; j < tk_; ++j) {
          if (!ok_[j]) continue;
          mpq_div(t.get(), sum.get(), nn.get());
          mpq_sub(t.get(), da[j].get(), t.get());
          mpq_div(ri.ds[j].get(), t.get(), nn.get());
        }
      }
    }
    // The logical inputs' gradients: dQ carries scale kd, dK scale qd.
    Q scale_q(p_.scale), scale_k(p_.scale);
    mpq_mul(scale_q.get(), scale_q.get(), Q(kd_).get());
    mpq_mul(scale_k.get(), scale_k.get(), Q(qd_).get());
    Q acc;
    for (int64_t h = h0_; h < h1_; ++h) {
      for (int64_t i = 0; i < p_.tq; ++i) {
        const RowInfo& ri = rows[static_cast<size_t>((h - h0_) * p_.tq + i)];
        if (!ri.rational) continue;
        const size_t row = row_index(p_, b_, h, i);
        for (size_t c = 0; c < dk_; ++c) {
          const size_t x = row * dk_ + c;
          if (d_.dq[x]) continue;
          mpq_set_ui(acc.get(), 0, 1);
          for (size_t j = 0; j < tk_; ++j) {
            if (!ri.ok[j]) continue;
            mpq_set_d(t.get(), kmat_[j * dk_ + c]);
            mpq_mul(t.get(), t.get(), ri.ds[j].get());
            mpq_add(acc.get(), acc.get(), t.get());
          }
          if (acc.zero()) {
            r_.dq[x] = 0.0;
            d_.dq[x] = 1;
          } else if (ri.f_one) {
            mpq_mul(acc.get(), acc.get(), scale_q.get());
            d_.dq[x] = round_rational(acc, r_.dq[x]);
          }
        }
      }
    }
    for (size_t j = 0; j < tk_; ++j) {
      const auto jj = static_cast<int64_t>(j);
      for (size_t c = 0; c < dv_; ++c) {
        const size_t x = kv_index(p_, b_, g_, jj, static_cast<int64_t>(c), p_.dv);
        if (d_.dv[x]) continue;
        mpq_set_ui(acc.get(), 0, 1);
        bool exact = true;
        for (int64_t h = h0_; h < h1_ && exact; ++h) {
          for (int64_t i = 0; i < p_.tq && exact; ++i) {
            const RowInfo& ri = rows[static_cast<size_t>((h - h0_) * p_.tq + i)];
            if (!ri.ok[j]) continue;
            const double o = p_.dout[out_index(p_, b_, h, i, static_cast<int64_t>(c))];
            if (o == 0) continue;
            if (!ri.rational) {
              exact = false;
              continue;
            }
            mpq_set_d(t.get(), o);
            mpq_set_si(u.get(), static_cast<long>(ri.n), 1);
            mpq_div(t.get(), t.get(), u.get());
            mpq_add(acc.get(), acc.get(), t.get());
          }
        }
        if (exact) d_.dv[x] = round_rational(acc, r_.dv[x]);
      }
      for (size_t c = 0; c < dk_; ++c) {
        const size_t x = kv_index(p_, b_, g_, jj, static_cast<int64_t>(c), p_.dk);
        if (d_.dk[x]) continue;
        // dK / scale = R + sum_k f_k C_k: R from the rows with f = 1, one
        // term per distinct |t| of the softcapped rows (f = sech^2(t / c)
        // depends on |t| only), C_k their exact rational coefficient.
        mpq_set_ui(acc.get(), 0, 1);
        std::vector<std::pair<const Q*, Q>> terms;
        bool exact = true;
        for (int64_t h = h0_; h < h1_ && exact; ++h) {
          for (int64_t i = 0; i < p_.tq && exact; ++i) {
            const RowInfo& ri = rows[static_cast<size_t>((h - h0_) * p_.tq + i)];
            if (!ri.ok[j]) continue;
            const double q = p_.q.at(b_, h, i, static_cast<int64_t>(c));
            if (q == 0) continue;
            if (!ri.rational) {
              exact = false;
              continue;
            }
            mpq_set_d(t.get(), q);
            mpq_mul(t.get(), t.get(), ri.ds[j].get());
            if (ri.f_one) {
              mpq_add(acc.get(), acc.get(), t.get());
              continue;
            }
            auto it = std::find_if(terms.begin(), terms.end(), [&](const auto& e) {
              return mpq_equal(e.first->get(), ri.abs_t.get()) != 0;
            });
            if (it == terms.end()) {
              terms.emplace_back(&ri.abs_t, Q());
              it = terms.end() - 1;
            }
            mpq_add(it->second.get(), it->second.get(), t.get());
          }
        }
        if (!exact) continue;
        std::erase_if(terms, [](const auto& e) { return e.second.zero(); });
        if (terms.empty()) {
          mpq_mul(acc.get(), acc.get(), scale_k.get());
          d_.dk[x] = round_rational(acc, r_.dk[x]);
        } else {
          d_.dk[x] = softcap_sum(acc, terms, r_.dk[x]);
        }
      }
    }
  }

  // scale (R + sum_k sech^2(u_k / c) C_k) for exact rationals R, u_k > 0
  // (distinct) and C_k != 0, correctly rounded. The value is irrational:
  // with u_k = a_k d for one rational d and integers a_k > 0, sech^2 is
  // 4 z^a / (z^a + 1)^2 in the transcendental z = e^{2d / c} (Lindemann),
  // and the term of the largest a_k has poles (at the primitive 2a-th
  // roots of unity) no other term has, so the sum is a nonconstant
  // rational function of z with rational coefficients, which takes no
  // rational value at a transcendental z. Hence it lies in the OPEN
  // interval computed here, and decide_open applies at any precision.
  bool softcap_sum(const Q& r, const std::vector<std::pair<const Q*, Q>>& terms,
                   double& out) {
    for (mpfr_prec_t prec : {mpfr_prec_t{128}, mpfr_prec_t{512}, mpfr_prec_t{2400}}) {
      Iv sum, u, f, cv, prod;
      for (Iv* v : {&sum, &u, &f, &cv, &prod}) v->set_prec(prec);
      Mp tmp(prec);
      // The transcendental part first, on its own: added to R term by term
      // it would be absorbed into R's rounding.
      sum.set_zero();
      for (const auto& [abs_t, coef] : terms) {
        mpfr_set_q(u.lo.get(), abs_t->get(), MPFR_RNDD);
        mpfr_set_q(u.hi.get(), abs_t->get(), MPFR_RNDU);
        mpfr_div_d(u.lo.get(), u.lo.get(), p_.softcap, MPFR_RNDD);
        mpfr_div_d(u.hi.get(), u.hi.get(), p_.softcap, MPFR_RNDU);
        sech2(f, u);
        mpfr_set_q(cv.lo.get(), coef.get(), MPFR_RNDD);
        mpfr_set_q(cv.hi.get(), coef.get(), MPFR_RNDU);
        imul(prod, f, cv, tmp);
        iadd(sum, sum, prod);
      }
      mpfr_add_q(sum.lo.get(), sum.lo.get(), r.get(), MPFR_RNDD);
      mpfr_add_q(sum.hi.get(), sum.hi.get(), r.get(), MPFR_RNDU);
      imul_d(sum, sum, p_.scale);
      imul_d(sum, sum, qd_);  // dK of the logical k
      if (decide_open(sum.lo.get(), sum.hi.get(), out)) return true;
    }
    return false;
  }

 private:
  bool row_pending(int64_t h, int64_t i) const {
    return oracle_detail::row_pending(p_, d_, b_, h, i);
  }

  bool kv_pending() const { return oracle_detail::kv_pending(p_, d_, b_, g_); }

  // exact_[j] = the exact score (without softcap) or the exact scaled dot
  // t_j (with softcap), for every key; ok_ = the allowed flags.
  void exact_scores(int64_t h, int64_t i) {
    for (size_t c = 0; c < dk_; ++c)
      q_[c] = p_.q.at(b_, h, i, static_cast<int64_t>(c));
    for (size_t j = 0; j < tk_; ++j) {
      const auto jj = static_cast<int64_t>(j);
      ok_[j] = p_.allowed(b_, h, i, jj) ? 1 : 0;
      exact_dot(dot_, q_.data(), &kmat_[j * dk_], dk_, false, prods_.get(),
                ptrs_);
      exact_mul_scale(scaled_, dot_);
      if (p_.softcap > 0) {
        mpfr_set_prec(exact_[j].get(), mpfr_get_prec(scaled_.get()));
        mpfr_set(exact_[j].get(), scaled_.get(), MPFR_RNDN);
      } else {
        exact_add_d(exact_[j], scaled_, p_.bias_at(b_, h, i, jj));
      }
    }
    if (sink_) {
      // The sink's logit is sink_h itself: no softcap, no bias, no scale.
      ok_[tk_] = 1;
      mpfr_set_prec(exact_[tk_].get(), 53);
      mpfr_set_d(exact_[tk_].get(), p_.sink[static_cast<size_t>(h)], MPFR_RNDN);
    }
  }

  // out = a * scale * qd * kd exactly (out must not be a): the logical
  // scores of stored inputs are scale (qd q) . (kd k) = (scale qd kd) q . k.
  void exact_mul_scale(Mp& out, const Mp& a) {
    if (!mpfr_number_p(a.get()) || mpfr_zero_p(a.get())) {
      mpfr_set_prec(out.get(), 2);
      mpfr_mul(out.get(), a.get(), eff_scale_.get(), MPFR_RNDN);
      return;
    }
    mpfr_set_prec(out.get(), mpfr_get_prec(a.get()) + mpfr_get_prec(eff_scale_.get()));
    mpfr_mul(out.get(), a.get(), eff_scale_.get(), MPFR_RNDN);
  }

  // Whether every class of equal allowed scores has the same mean of
  // column c; if so, that mean correctly rounded.
  bool common_class_mean(int64_t c, double& out) {
    // Compares sum_k / n_k with the first class's by cross-multiplying:
    // every quantity is an exact sum of doubles, so at 2400 + log2 bits
    // the comparisons are exact.
    const mpfr_prec_t wide = 2400 + 2 * 64;
    Mp s0(wide), s1(wide), x(wide), y(wide);
    // The sink (index tk_, value 0) is a class like any other.
    std::vector<uint8_t> done(kt_, 0);
    int64_t n0 = 0;
    bool first = true;
    for (size_t j = 0; j < kt_; ++j) {
      if (!ok_[j] || done[j]) continue;
      Mp& sum = first ? s0 : s1;
      mpfr_set_zero(sum.get(), 1);
      int64_t n = 0;
      for (size_t r = j; r < kt_; ++r) {
        if (!ok_[r] || done[r] ||
            !mpfr_equal_p(exact_[r].get(), exact_[j].get()))
          continue;
        done[r] = 1;
        ++n;
        mpfr_add_d(sum.get(), sum.get(),
                   vmat_[r * dv_ + static_cast<size_t>(c)], MPFR_RNDN);
      }
      if (first) {
        n0 = n;
        first = false;
        continue;
      }
      mpfr_mul_si(x.get(), s1.get(), static_cast<long>(n0), MPFR_RNDN);
      mpfr_mul_si(y.get(), s0.get(), static_cast<long>(n), MPFR_RNDN);
      if (!mpfr_equal_p(x.get(), y.get())) return false;
    }
    if (first) return false;
    // s0 / n0 to nearest: when the quotient is exact at this precision the
    // interval is a point; otherwise the exact mean lies strictly between
    // two neighbouring numbers of this precision, with no double or
    // midpoint strictly between them, so decide_open settles it.
    // The output of stored v is vd times the mean: vd s0 is exact at 53
    // more bits.
    Mp sv(wide + 64);
    mpfr_mul_d(sv.get(), s0.get(), vd_, MPFR_RNDN);
    Iv q;
    q.set_prec(wide + 64);
    mpfr_div_si(q.lo.get(), sv.get(), static_cast<long>(n0), MPFR_RNDD);
    mpfr_div_si(q.hi.get(), sv.get(), static_cast<long>(n0), MPFR_RNDU);
    return decide_open(q.lo.get(), q.hi.get(), out);
  }

  void row(int64_t h, int64_t i, bool diagnostics) {
    if (!forward(h, i, diagnostics, true)) return;
    if (grads_) backward(h, i, row_index(p_, b_, h, i));
  }

  // The forward pass of row (b, h, i): e_, l_ and the weights a_ of every
  // key, the sink's (index tk_) included. With `record` it stores each
  // value it decides (and with `diagnostics` the diagnostic fields);
  // without, it only leaves a_ for the caller. False for a row without
  // any allowed real key (empty, or sink-only): its values are exact and
  // set by the caller, and it contributes nothing to any gradient.
  bool forward(int64_t h, int64_t i, bool diagnostics, bool record) {
    const size_t row = row_index(p_, b_, h, i);
    exact_scores(h, i);
    const bool cap = p_.softcap > 0;
    int64_t n = 0;
    size_t jmax = 0;
    bool any = false;
    for (size_t j = 0; j < kt_; ++j) {
      const auto jj = static_cast<int64_t>(j);
      const bool is_sink = j == tk_;
      Iv& s = s_[j];
      if (cap && is_sink) {
        s.set_d(p_.sink[static_cast<size_t>(h)]);  // not softcapped
      } else if (cap) {
        // s = c tanh(t / c) + bias, every step monotone in t.
        mpfr_div_d(th_[j].lo.get(), exact_[j].get(), p_.softcap, MPFR_RNDD);
        mpfr_div_d(th_[j].hi.get(), exact_[j].get(), p_.softcap, MPFR_RNDU);
        if (grads_) sech2(f_[j], th_[j]);
        mpfr_tanh(th_[j].lo.get(), th_[j].lo.get(), MPFR_RNDD);
        mpfr_tanh(th_[j].hi.get(), th_[j].hi.get(), MPFR_RNDU);
        imul_d(s, th_[j], p_.softcap);
        const double bias = p_.bias_at(b_, h, i, jj);
        mpfr_add_d(s.lo.get(), s.lo.get(), bias, MPFR_RNDD);
        mpfr_add_d(s.hi.get(), s.hi.get(), bias, MPFR_RNDU);
      }
      mpfr_srcptr hi = cap ? s.hi.get() : exact_[j].get();
      if (diagnostics && !is_sink) {
        const size_t w = weight_index(p_, b_, h, i, jj);
        r_.scores[w] = mpfr_get_d(cap ? s.lo.get() : hi, MPFR_RNDN);
        exact_dot(dot_, q_.data(), &kmat_[j * dk_], dk_, true, prods_.get(),
                  ptrs_);
        exact_mul_scale(absdot_, dot_);
        mpfr_abs(absdot_.get(), absdot_.get(), MPFR_RNDN);
        r_.abs_dot[w] = mpfr_get_d(absdot_.get(), MPFR_RNDN);
      }
      if (!ok_[j]) continue;
      if (!is_sink) ++n;
      if (!any || mpfr_greater_p(hi, cap ? s_[jmax].hi.get() : exact_[jmax].get()))
        jmax = j;
      any = true;
    }
    if (n == 0) return false;  // empty or sink-only: exact, set by the caller
    const int64_t terms = n + (sink_ ? 1 : 0);
    // Without softcap m is the largest score (or the sink), exact. With
    // softcap it is the interval of the largest score, and keys with the
    // same exact t and bias as that key get x = s - m = 0 exactly (the same
    // number less itself), which keeps single-key and equal-score rows
    // exactly rational.
    Mp& m = m_;
    if (!cap) {
      mpfr_set_prec(m.get(), mpfr_get_prec(exact_[jmax].get()));
      mpfr_set(m.get(), exact_[jmax].get(), MPFR_RNDN);
    }
    const bool max_is_sink = jmax == tk_;
    const double bias_max = max_is_sink ? 0.0 : p_.bias_at(b_, h, i, static_cast<int64_t>(jmax));
    l_.set_zero();
    for (size_t j = 0; j < kt_; ++j) {
      if (!ok_[j]) continue;
      Iv& e = e_[j];
      if (!cap) {
        mpfr_sub(e.lo.get(), exact_[j].get(), m.get(), MPFR_RNDD);
        mpfr_sub(e.hi.get(), exact_[j].get(), m.get(), MPFR_RNDU);
      } else if (j == jmax ||
                 (j != tk_ && !max_is_sink &&
                  mpfr_equal_p(exact_[j].get(), exact_[jmax].get()) &&
                  p_.bias_at(b_, h, i, static_cast<int64_t>(j)) == bias_max)) {
        e.set_zero();
      } else {
        isub(e, s_[j], s_[jmax]);
      }
      mpfr_exp(e.lo.get(), e.lo.get(), MPFR_RNDD);
      mpfr_exp(e.hi.get(), e.hi.get(), MPFR_RNDU);
      iadd(l_, l_, e);
    }
    for (size_t j = 0; j < kt_; ++j) {
      if (!ok_[j]) continue;
      idiv_pos(a_[j], e_[j], l_);
      if (j == tk_ || !record) continue;  // the sink's weight is not reported
      const size_t w = weight_index(p_, b_, h, i, static_cast<int64_t>(j));
      if (!d_.weights[w]) d_.weights[w] = decide(a_[j], r_.weights[w]);
    }
    if (!record) return true;
    for (size_t c = 0; c < dv_; ++c) {
      Iv& num = num_[c];
      num.set_zero();
      for (size_t j = 0; j < tk_; ++j)  // the sink's value is 0
        if (ok_[j]) iadd_mul_d(num, e_[j], vmat_[j * dv_ + c], tmp_);
      idiv_pos(tmp_, num, l_);
      imul_d(tmp_, tmp_, vd_);  // o = vd sum_j a_j v_j for stored v
      const size_t o = out_index(p_, b_, h, i, static_cast<int64_t>(c));
      if (!d_.out[o]) d_.out[o] = decide(tmp_, r_.out[o]);
    }
    mpfr_log(lse_.lo.get(), l_.lo.get(), MPFR_RNDD);
    mpfr_log(lse_.hi.get(), l_.hi.get(), MPFR_RNDU);
    mpfr_add(lse_.lo.get(), lse_.lo.get(), cap ? s_[jmax].lo.get() : m.get(),
             MPFR_RNDD);
    mpfr_add(lse_.hi.get(), lse_.hi.get(), cap ? s_[jmax].hi.get() : m.get(),
             MPFR_RNDU);
    if (!d_.lse[row]) d_.lse[row] = decide(lse_, r_.lse[row]);
    if (!d_.lse[row] && !cap && terms >= 2) {
      // lse = m + log l with l = sum_j e^{x_j} > 1 (n >= 2 positive terms,
      // one of them e^0; the sink is one more term e^{sink - m}), so
      // lse > m. And lse is irrational: log l = r rational would give
      // e^r - sum_j e^{x_j} = 0 with r > 0 >= x_j (every x_j rational: the
      // sink is a double), against Lindemann-Weierstrass (exponentials of
      // distinct rationals are linearly independent over the rationals).
      // So lse lies in the open interval (max(lo, m), hi). This decides
      // rows where the other keys are so far below the maximum (x_j <
      // -1600) that l rounds to 1 even at 2400 bits, which would leave
      // lse = m + tiny undecided whenever the exact score m is a midpoint.
      mpfr_srcptr lo = mpfr_less_p(lse_.lo.get(), m.get()) ? m.get()
                                                          : lse_.lo.get();
      d_.lse[row] = decide_open(lo, lse_.hi.get(), r_.lse[row]);
    }
    if (diagnostics) {
      r_.row_max[row] =
          mpfr_get_d(cap ? s_[jmax].lo.get() : m.get(), MPFR_RNDN);
      r_.row_sum[row] = mpfr_get_d(l_.lo.get(), MPFR_RNDN);
    }
    return true;
  }

  void set_precision(mpfr_prec_t prec) {
    prec_ = prec;
    for (Iv* arr : {s_.get(), th_.get(), e_.get(), a_.get(), dt_.get(), f_.get()})
      for (size_t j = 0; j < kt_; ++j) arr[j].set_prec(prec);
    for (size_t c = 0; c < std::max(dk_, dv_); ++c) num_[c].set_prec(prec);
    for (Iv* x : {&l_, &tmp_, &tmp2_, &sigma_, &lse_}) x->set_prec(prec);
    mpfr_set_prec(t_.get(), prec);
  }

  // dA_j = dO . (vd v_j), sigma = sum_j a_j dA_j and dS_j = a_j (dA_j -
  // sigma) of the row forward() left, into dt_, for every key: the sink
  // (value 0, so dA = 0) gets dS_sink = -a_sink sigma, its dsink term.
  void ds_and_sigma(int64_t h, int64_t i) {
    for (size_t c = 0; c < dv_; ++c)
      dout_[c] = p_.dout[out_index(p_, b_, h, i, static_cast<int64_t>(c))];
    sigma_.set_zero();
    for (size_t j = 0; j < kt_; ++j) {
      if (!ok_[j]) continue;
      // dA_j = dO . v_j: products of doubles, exact at prec >= 106.
      Iv& da = dt_[j];
      da.set_zero();
      for (size_t c = 0; c < dv_; ++c) {
        tmp_.set_d(dout_[c]);
        iadd_mul_d(da, tmp_, vmat_[j * dv_ + c], tmp2_);
      }
      imul_d(da, da, vd_);
      imul(tmp_, a_[j], da, t_);
      iadd(sigma_, sigma_, tmp_);
    }
    for (size_t j = 0; j < kt_; ++j) {
      if (!ok_[j]) continue;
      Iv& dt = dt_[j];
      isub(tmp_, dt, sigma_);
      imul(dt, a_[j], tmp_, t_);  // dS_j
    }
  }

  // SPEC section 1's backward for one row, in intervals.
  void backward(int64_t h, int64_t i, size_t row) {
    ds_and_sigma(h, i);
    if (dsink_acc_ && sink_) iadd(dsink_acc_[h], dsink_acc_[h], dt_[tk_]);
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j]) continue;
      Iv& dt = dt_[j];
      if (p_.softcap > 0) {
        // dT = dS (1 - tanh^2) = dS sech^2(t / c), the latter without the
        // cancellation of 1 - tanh^2 at large |t / c|.
        imul(tmp_, dt, f_[j], t_);
        mpfr_set(dt.lo.get(), tmp_.lo.get(), MPFR_RNDD);
        mpfr_set(dt.hi.get(), tmp_.hi.get(), MPFR_RNDU);
      }
    }
    for (size_t c = 0; c < dk_; ++c) {
      Iv& acc = num_[c];
      acc.set_zero();
      for (size_t j = 0; j < tk_; ++j)
        if (ok_[j]) iadd_mul_d(acc, dt_[j], kmat_[j * dk_ + c], tmp_);
      imul_d(acc, acc, p_.scale);
      imul_d(acc, acc, kd_);  // dQ of the logical q: scale kd sum_j dS_j k_j
      const size_t x = row * dk_ + c;
      if (!d_.dq[x]) d_.dq[x] = decide(acc, r_.dq[x]);
    }
    if (!kv_pending()) return;
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j]) continue;
      for (size_t c = 0; c < dk_; ++c) {
        imul_d(tmp_, dt_[j], q_[c]);
        iadd_mul_d(dkacc_[j * dk_ + c], tmp_, p_.scale, tmp2_);
      }
      for (size_t c = 0; c < dv_; ++c)
        iadd_mul_d(dvacc_[j * dv_ + c], a_[j], dout_[c], tmp_);
    }
  }

  const Problem& p_;
  int64_t b_, g_, h0_ = 0, h1_ = 0;
  OracleResult& r_;
  Decided& d_;
  size_t tk_, dk_, dv_;
  size_t kt_;  // keys in the arrays: tk_, plus the sink's
  bool grads_, sink_;
  double qd_, kd_, vd_;  // descales (1 without)
  Mp eff_scale_;         // scale * qd * kd, exact
  mpfr_prec_t prec_ = 128;
  std::vector<double> kmat_, vmat_, q_, dout_;
  std::vector<uint8_t> ok_;
  std::vector<mpfr_ptr> ptrs_;
  std::unique_ptr<Mp[]> prods_, exact_;
  std::unique_ptr<Iv[]> s_, th_, e_, a_, dt_, f_, num_, dkacc_, dvacc_;
  Iv l_, tmp_, tmp2_, sigma_, lse_;
  Mp dot_, scaled_, m_, t_, absdot_;

 public:
  // Where backward() adds each row's dS_sink (one interval per head), or
  // null; set by exact_group for its first precision only.
  Iv* dsink_acc_ = nullptr;
};

}  // namespace

struct DsinkSums {
  size_t heads = 0;
  std::unique_ptr<Iv[]> acc;
  bool complete = true;
};

void DsinkSumsDeleter::operator()(DsinkSums* s) const { delete s; }

DsinkSumsPtr make_dsink_sums(int64_t heads) {
  DsinkSumsPtr s(new DsinkSums);
  s->heads = static_cast<size_t>(heads);
  s->acc = make_array<Iv>(s->heads);
  for (size_t h = 0; h < s->heads; ++h) {
    s->acc[h].set_prec(kLevels[0]);
    s->acc[h].set_zero();
  }
  return s;
}

void exact_group(const Problem& p, int64_t b, int64_t g, OracleResult& r,
                 Decided& d, bool fill_diagnostics, DsinkSums* sums) {
  // Setting up the MPFR arrays costs more than the fast path of a small
  // group: skip it when the fast path decided everything.
  if (!fill_diagnostics && !group_pending(p, b, g, d)) {
    if (sums) sums->complete = false;  // its rows were not run
    return;
  }
  Group group(p, b, g, r, d);
  bool diagnostics = fill_diagnostics;
  for (mpfr_prec_t prec : kLevels) {
    if (!diagnostics && !group.pending()) {
      if (sums && prec == kLevels[0]) sums->complete = false;
      return;
    }
    // The first run computes every row of the group when dK / dV are
    // pending (always, with gradients, at the first level): its backward
    // adds each row's dS_sink to the sums. Otherwise they are incomplete.
    const bool collect = sums && prec == kLevels[0];
    if (collect && !(!p.dout.empty() && kv_pending(p, d, b, g))) sums->complete = false;
    group.dsink_acc_ = collect && sums->complete ? sums->acc.get() : nullptr;
    group.run(prec, diagnostics);
    group.dsink_acc_ = nullptr;
    diagnostics = false;
  }
  if (!group.pending()) return;
  group.class_means();
  group.rational_gradients();
  group.report_undecided();
}

void exact_dsink(const std::vector<const Problem*>& parts, int64_t heads,
                 std::vector<double>& dsink, std::vector<uint8_t>& decided,
                 const DsinkSums* sums) {
  const auto nh = static_cast<size_t>(heads);
  dsink.assign(nh, 0.0);
  decided.assign(nh, 0);
  const bool first_done = sums && sums->complete && sums->heads == nh;
  if (first_done) {
    bool all = true;
    for (size_t h = 0; h < nh; ++h) {
      decided[h] = decide(sums->acc[h], dsink[h]);
      all = all && decided[h];
    }
    if (all) return;
  }
  auto acc = make_array<Iv>(nh);
  OracleResult scratch;  // forward(.., record = false) writes nothing
  Decided scratch_d;
  for (mpfr_prec_t prec : kLevels) {
    if (first_done && prec == kLevels[0]) continue;
    for (size_t h = 0; h < nh; ++h) {
      acc[h].set_prec(prec);
      acc[h].set_zero();
    }
    for (const Problem* part : parts) {
      for (int64_t b = 0; b < part->batch; ++b) {
        for (int64_t g = 0; g < part->kv_heads; ++g) {
          Group group(*part, b, g, scratch, scratch_d);
          group.add_dsink(prec, acc.get());
        }
      }
    }
    bool all = true;
    for (size_t h = 0; h < nh; ++h) {
      if (!decided[h]) decided[h] = decide(acc[h], dsink[h]);
      all = all && decided[h];
    }
    if (all) return;
  }
}

}  // namespace attncheck::oracle_detail
