// The oracle computes every quantity once at 134 bits and rounds it to the
// nearest double. Rounding twice (to 134, then to 53 bits) can only go wrong
// for a value within 2^-134 relative of a midpoint between doubles; the Ziv
// rounding test and exact rational cases of SPEC section 4 that certify
// such values are not done here yet, so nothing is reported as uncertified.

#include "attncheck/oracle.h"

#include <cmath>
#include <limits>
#include <vector>

#include <boost/multiprecision/mpfr.hpp>

namespace attncheck {
namespace {

// 40 decimal digits is 134 bits. A fixed precision on the stack keeps the
// inner loops free of heap allocation and leaves MPFR's global default
// precision alone for everyone else in the process.
using Real = boost::multiprecision::number<
    boost::multiprecision::mpfr_float_backend<
        40, boost::multiprecision::allocate_stack>,
    boost::multiprecision::et_off>;

static_assert(std::numeric_limits<Real>::digits >=
                  static_cast<int>(kOracleBits),
              "the oracle must compute at kOracleBits or more");
// A product of two doubles has at most 106 significant bits, so it is exact.
static_assert(std::numeric_limits<Real>::digits >= 106);

// Boost's conversion does round to nearest today, but the contract is the
// correctly rounded double, so ask MPFR for it explicitly.
double to_double(const Real& x) {
  return mpfr_get_d(x.backend().data(), MPFR_RNDN);
}

// Working storage, allocated once per oracle call. Inputs are converted to
// Real once per row or per K/V head rather than once per product.
struct Scratch {
  std::vector<Real> q;      // q_i, [dk]
  std::vector<Real> k;      // K of the current K/V head, [tk][dk]
  std::vector<Real> v;      // V of the current K/V head, [tk][dv]
  std::vector<Real> s;      // scores s_j
  std::vector<Real> e;      // exp(s_j - m) for allowed j
  std::vector<uint8_t> ok;  // allowed flags
  std::vector<Real> acc;    // sum_j e_j v_j, one per output column
};

}  // namespace

OracleResult oracle(const Problem& p) {
  OracleResult r;
  const size_t rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const size_t scores = rows * static_cast<size_t>(p.tk);
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(scores, 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  r.scores.assign(scores, 0.0);
  r.abs_dot.assign(scores, 0.0);
  r.row_max.assign(rows, -std::numeric_limits<double>::infinity());
  r.row_sum.assign(rows, 0.0);
  r.row_allowed.assign(rows, 0);
  r.row_empty.assign(rows, 0);

  Scratch w;
  w.q.resize(static_cast<size_t>(p.dk));
  w.k.resize(static_cast<size_t>(p.tk * p.dk));
  w.v.resize(static_cast<size_t>(p.tk * p.dv));
  w.s.resize(static_cast<size_t>(p.tk));
  w.e.resize(static_cast<size_t>(p.tk));
  w.ok.resize(static_cast<size_t>(p.tk));
  w.acc.resize(static_cast<size_t>(p.dv));

  const Real scale = p.scale;
  const Real abs_scale = std::fabs(p.scale);
  const Real cap = p.softcap;
  const bool softcap = p.softcap > 0;
  Real dot, abs_sum, prod, m, l, t;

  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t loaded_g = -1;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      if (g != loaded_g) {
        for (int64_t j = 0; j < p.tk; ++j) {
          for (int64_t c = 0; c < p.dk; ++c)
            w.k[static_cast<size_t>(j * p.dk + c)] = p.k.at(b, g, j, c);
          for (int64_t d = 0; d < p.dv; ++d)
            w.v[static_cast<size_t>(j * p.dv + d)] = p.v.at(b, g, j, d);
        }
        loaded_g = g;
      }
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        for (int64_t c = 0; c < p.dk; ++c)
          w.q[static_cast<size_t>(c)] = p.q.at(b, h, i, c);
        int64_t n = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          const size_t ju = static_cast<size_t>(j);
          dot = 0;
          abs_sum = 0;
          for (size_t c = 0; c < w.q.size(); ++c) {
            prod = w.q[c];
            prod *= w.k[ju * w.q.size() + c];
            dot += prod;
            if (prod < 0) {
              abs_sum -= prod;
            } else {
              abs_sum += prod;
            }
          }
          Real& s = w.s[ju];
          s = scale * dot;
          if (softcap) {
            t = s / cap;
            s = cap * tanh(t);
          }
          s += p.bias_at(b, h, i, j);
          const size_t wi = weight_index(p, b, h, i, j);
          r.scores[wi] = to_double(s);
          r.abs_dot[wi] = to_double(abs_scale * abs_sum);
          w.ok[ju] = p.allowed(b, h, i, j) ? 1 : 0;
          if (w.ok[ju]) {
            if (n == 0 || s > m) m = s;
            ++n;
          }
        }
        r.row_allowed[row] = n;
        if (n == 0) {
          // The normalisation is undefined: report the row, leave the zeros
          // and -inf the `zero` empty-row policy prescribes.
          r.row_empty[row] = 1;
          r.empty_rows.push_back({b, h, i});
          continue;
        }
        l = 0;
        for (Real& a : w.acc) a = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          const size_t ju = static_cast<size_t>(j);
          if (!w.ok[ju]) continue;
          w.e[ju] = exp(w.s[ju] - m);
          l += w.e[ju];
          for (size_t d = 0; d < w.acc.size(); ++d) {
            prod = w.v[ju * w.acc.size() + d];
            prod *= w.e[ju];
            w.acc[d] += prod;
          }
        }
        // Dividing the unnormalised sums once by l avoids a rounding of
        // every weight before the weighted sum.
        for (int64_t j = 0; j < p.tk; ++j) {
          const size_t ju = static_cast<size_t>(j);
          if (w.ok[ju])
            r.weights[weight_index(p, b, h, i, j)] = to_double(w.e[ju] / l);
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          r.out[out_index(p, b, h, i, d)] =
              to_double(w.acc[static_cast<size_t>(d)] / l);
        }
        r.row_max[row] = to_double(m);
        r.row_sum[row] = to_double(l);
        r.lse[row] = to_double(m + log(l));
      }
    }
  }
  return r;
}

}  // namespace attncheck
