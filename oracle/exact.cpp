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
// What is still undecided after all of this goes into r.uncertified.

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
// value of everything inside, the exact result included.
bool decide(const Iv& v, double& out) {
  const double lo = mpfr_get_d(v.lo.get(), MPFR_RNDN);
  const double hi = mpfr_get_d(v.hi.get(), MPFR_RNDN);
  if (!(lo == hi)) return false;
  out = lo == 0 ? 0.0 : lo;
  return true;
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
  for (size_t c = 0; c < n; ++c) {
    mpfr_ptr x = prods[c].get();
    mpfr_set_d(x, a[c], MPFR_RNDN);  // exact: 106 >= 53 bits
    mpfr_mul_d(x, x, b[c], MPFR_RNDN);  // exact: 53 + 53 bits
    if (absolute) mpfr_abs(x, x, MPFR_RNDN);
    if (mpfr_zero_p(x)) continue;
    if (ptrs.empty() || mpfr_get_exp(x) > top) top = mpfr_get_exp(x);
    if (ptrs.empty() || low_bit(x) < bottom) bottom = low_bit(x);
    ptrs.push_back(x);
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

// out = a * d exactly (out must not be a).
void exact_mul_d(Mp& out, const Mp& a, double d) {
  mpfr_set_prec(out.get(), mpfr_get_prec(a.get()) + 53);
  mpfr_mul_d(out.get(), a.get(), d, MPFR_RNDN);
}

// out = a + d exactly (out must not be a).
void exact_add_d(Mp& out, const Mp& a, double d) {
  if (d == 0 || mpfr_zero_p(a.get())) {
    mpfr_set_prec(out.get(), std::max<mpfr_prec_t>(mpfr_get_prec(a.get()), 53));
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
        grads_(!p.dout.empty()) {
    kmat_.resize(tk_ * dk_);
    vmat_.resize(tk_ * dv_);
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
    ok_.resize(tk_);
    prods_ = make_array<Mp>(std::max(dk_, dv_));
    for (size_t c = 0; c < std::max(dk_, dv_); ++c)
      mpfr_set_prec(prods_[c].get(), 106);
    exact_ = make_array<Mp>(tk_);
    s_ = make_array<Iv>(tk_);
    th_ = make_array<Iv>(tk_);
    e_ = make_array<Iv>(tk_);
    a_ = make_array<Iv>(tk_);
    dt_ = make_array<Iv>(tk_);
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
    prec_ = prec;
    for (Iv* arr : {s_.get(), th_.get(), e_.get(), a_.get(), dt_.get()})
      for (size_t j = 0; j < tk_; ++j) arr[j].set_prec(prec);
    for (size_t c = 0; c < std::max(dk_, dv_); ++c) num_[c].set_prec(prec);
    for (Iv* x : {&l_, &tmp_, &tmp2_, &sigma_, &lse_}) x->set_prec(prec);
    mpfr_set_prec(t_.get(), prec);
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
        if (!d_.dk[x]) d_.dk[x] = decide(dkacc_[j * dk_ + c], r_.dk[x]);
      }
      for (size_t c = 0; c < dv_; ++c) {
        const size_t x = kv_index(p_, b_, g_, jj, static_cast<int64_t>(c),
                                  p_.dv);
        if (!d_.dv[x]) d_.dv[x] = decide(dvacc_[j * dv_ + c], r_.dv[x]);
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
      exact_mul_d(scaled_, dot_, p_.scale);
      if (p_.softcap > 0) {
        mpfr_set_prec(exact_[j].get(), mpfr_get_prec(scaled_.get()));
        mpfr_set(exact_[j].get(), scaled_.get(), MPFR_RNDN);
      } else {
        exact_add_d(exact_[j], scaled_, p_.bias_at(b_, h, i, jj));
      }
    }
  }

  // Whether every class of equal allowed scores has the same mean of
  // column c; if so, that mean correctly rounded.
  bool common_class_mean(int64_t c, double& out) {
    // Compares sum_k / n_k with the first class's by cross-multiplying:
    // every quantity is an exact sum of doubles, so at 2400 + log2 bits
    // the comparisons are exact.
    const mpfr_prec_t wide = 2400 + 2 * 64;
    Mp s0(wide), s1(wide), x(wide), y(wide);
    std::vector<uint8_t> done(tk_, 0);
    int64_t n0 = 0;
    bool first = true;
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j] || done[j]) continue;
      Mp& sum = first ? s0 : s1;
      mpfr_set_zero(sum.get(), 1);
      int64_t n = 0;
      for (size_t r = j; r < tk_; ++r) {
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
    // s0 / n0 to nearest: the quotient is a midpoint only if exact, and an
    // inexact quotient at this precision has no double or midpoint between
    // it and the exact value except at its own position, so the interval
    // [down, up] settles it unless an end is that midpoint.
    Iv q;
    q.set_prec(wide);
    mpfr_div_si(q.lo.get(), s0.get(), static_cast<long>(n0), MPFR_RNDD);
    mpfr_div_si(q.hi.get(), s0.get(), static_cast<long>(n0), MPFR_RNDU);
    return decide(q, out);
  }

  void row(int64_t h, int64_t i, bool diagnostics) {
    const size_t row = row_index(p_, b_, h, i);
    exact_scores(h, i);
    const bool cap = p_.softcap > 0;
    int64_t n = 0;
    size_t jmax = 0;
    for (size_t j = 0; j < tk_; ++j) {
      const auto jj = static_cast<int64_t>(j);
      Iv& s = s_[j];
      if (cap) {
        // s = c tanh(t / c) + bias, every step monotone in t.
        mpfr_div_d(th_[j].lo.get(), exact_[j].get(), p_.softcap, MPFR_RNDD);
        mpfr_div_d(th_[j].hi.get(), exact_[j].get(), p_.softcap, MPFR_RNDU);
        mpfr_tanh(th_[j].lo.get(), th_[j].lo.get(), MPFR_RNDD);
        mpfr_tanh(th_[j].hi.get(), th_[j].hi.get(), MPFR_RNDU);
        imul_d(s, th_[j], p_.softcap);
        const double bias = p_.bias_at(b_, h, i, jj);
        mpfr_add_d(s.lo.get(), s.lo.get(), bias, MPFR_RNDD);
        mpfr_add_d(s.hi.get(), s.hi.get(), bias, MPFR_RNDU);
      }
      mpfr_srcptr hi = cap ? s.hi.get() : exact_[j].get();
      if (diagnostics) {
        const size_t w = weight_index(p_, b_, h, i, jj);
        r_.scores[w] = mpfr_get_d(cap ? s.lo.get() : hi, MPFR_RNDN);
        exact_dot(dot_, q_.data(), &kmat_[j * dk_], dk_, true, prods_.get(),
                  ptrs_);
        mpfr_mul_d(t_.get(), dot_.get(), std::fabs(p_.scale), MPFR_RNDN);
        r_.abs_dot[w] = mpfr_get_d(t_.get(), MPFR_RNDN);
      }
      if (!ok_[j]) continue;
      if (n == 0 || mpfr_greater_p(hi, cap ? s_[jmax].hi.get()
                                           : exact_[jmax].get()))
        jmax = j;
      ++n;
    }
    if (n == 0) return;  // empty row: exact zeros, set by the caller
    // Without softcap m is the largest score, exact. With softcap it is
    // the interval of the largest score, and keys with the same exact t and
    // bias as that key get x = s - m = 0 exactly (the same number less
    // itself), which keeps single-key and equal-score rows exactly
    // rational.
    Mp& m = m_;
    if (!cap) {
      mpfr_set_prec(m.get(), mpfr_get_prec(exact_[jmax].get()));
      mpfr_set(m.get(), exact_[jmax].get(), MPFR_RNDN);
    }
    const double bias_max = p_.bias_at(b_, h, i, static_cast<int64_t>(jmax));
    l_.set_zero();
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j]) continue;
      Iv& e = e_[j];
      if (!cap) {
        mpfr_sub(e.lo.get(), exact_[j].get(), m.get(), MPFR_RNDD);
        mpfr_sub(e.hi.get(), exact_[j].get(), m.get(), MPFR_RNDU);
      } else if (mpfr_equal_p(exact_[j].get(), exact_[jmax].get()) &&
                 p_.bias_at(b_, h, i, static_cast<int64_t>(j)) == bias_max) {
        e.set_zero();
      } else {
        isub(e, s_[j], s_[jmax]);
      }
      mpfr_exp(e.lo.get(), e.lo.get(), MPFR_RNDD);
      mpfr_exp(e.hi.get(), e.hi.get(), MPFR_RNDU);
      iadd(l_, l_, e);
    }
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j]) continue;
      idiv_pos(a_[j], e_[j], l_);
      const size_t w = weight_index(p_, b_, h, i, static_cast<int64_t>(j));
      if (!d_.weights[w]) d_.weights[w] = decide(a_[j], r_.weights[w]);
    }
    for (size_t c = 0; c < dv_; ++c) {
      Iv& num = num_[c];
      num.set_zero();
      for (size_t j = 0; j < tk_; ++j)
        if (ok_[j]) iadd_mul_d(num, e_[j], vmat_[j * dv_ + c], tmp_);
      idiv_pos(tmp_, num, l_);
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
    if (diagnostics) {
      r_.row_max[row] =
          mpfr_get_d(cap ? s_[jmax].lo.get() : m.get(), MPFR_RNDN);
      r_.row_sum[row] = mpfr_get_d(l_.lo.get(), MPFR_RNDN);
    }
    if (grads_) backward(h, i, row);
  }

  // SPEC section 1's backward for one row, in intervals.
  void backward(int64_t h, int64_t i, size_t row) {
    for (size_t c = 0; c < dv_; ++c)
      dout_[c] = p_.dout[out_index(p_, b_, h, i, static_cast<int64_t>(c))];
    sigma_.set_zero();
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j]) continue;
      // dA_j = dO . v_j: products of doubles, exact at prec >= 106.
      Iv& da = dt_[j];
      da.set_zero();
      for (size_t c = 0; c < dv_; ++c) {
        tmp_.set_d(dout_[c]);
        iadd_mul_d(da, tmp_, vmat_[j * dv_ + c], tmp2_);
      }
      imul(tmp_, a_[j], da, t_);
      iadd(sigma_, sigma_, tmp_);
    }
    for (size_t j = 0; j < tk_; ++j) {
      if (!ok_[j]) continue;
      Iv& dt = dt_[j];
      isub(tmp_, dt, sigma_);
      imul(dt, a_[j], tmp_, t_);  // dS_j
      if (p_.softcap > 0) {
        // dT = dS (1 - tanh^2).
        imul(tmp_, th_[j], th_[j], t_);
        mpfr_ui_sub(tmp2_.lo.get(), 1, tmp_.hi.get(), MPFR_RNDD);
        mpfr_ui_sub(tmp2_.hi.get(), 1, tmp_.lo.get(), MPFR_RNDU);
        imul(tmp_, dt, tmp2_, t_);
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
  bool grads_;
  mpfr_prec_t prec_ = 128;
  std::vector<double> kmat_, vmat_, q_, dout_;
  std::vector<uint8_t> ok_;
  std::vector<mpfr_ptr> ptrs_;
  std::unique_ptr<Mp[]> prods_, exact_;
  std::unique_ptr<Iv[]> s_, th_, e_, a_, dt_, num_, dkacc_, dvacc_;
  Iv l_, tmp_, tmp2_, sigma_, lse_;
  Mp dot_, scaled_, m_, t_;
};

}  // namespace

void exact_group(const Problem& p, int64_t b, int64_t g, OracleResult& r,
                 Decided& d, bool fill_diagnostics) {
  // Setting up the MPFR arrays costs more than the fast path of a small
  // group: skip it when the fast path decided everything.
  if (!fill_diagnostics && !group_pending(p, b, g, d)) return;
  Group group(p, b, g, r, d);
  bool diagnostics = fill_diagnostics;
  for (mpfr_prec_t prec : kLevels) {
    if (!diagnostics && !group.pending()) return;
    group.run(prec, diagnostics);
    diagnostics = false;
  }
  if (!group.pending()) return;
  group.class_means();
  group.report_undecided();
}

}  // namespace attncheck::oracle_detail
