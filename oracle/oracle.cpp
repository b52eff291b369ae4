// The oracle: every reported double (out, weights, lse, dq, dk, dv) is the
// correctly rounded value of the exact result of SPEC section 1 for the
// problem's doubles, or is listed in OracleResult::uncertified.
//
// How it is proven, per K/V group (b, g) (the query heads sharing K/V head
// g, which is the unit dK and dV sum over):
//  1. Exact zeros need no proof: disallowed weights, and the out, weights,
//     lse = -inf and dQ rows of empty rows, are set here by construction.
//  2. fast.cpp computes the group in double-double arithmetic with a
//     rigorous bound on the error of every value and keeps a value when the
//     whole interval value +- bound rounds to one double.
//  3. exact.cpp recomputes the groups with undecided values (or all of a
//     group whose inputs are outside the fast path's range) from exact
//     scores in MPFR interval arithmetic at 128, 256, 512 and 2400 bits, and
//     handles the exactly rational cases; see the comment there.
// scores, abs_dot, row_max and row_sum are diagnostics for the tolerances:
// nearest doubles of values computed to well over 53 bits, not certified.

#include "attncheck/oracle.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "attncheck/error.h"
#include "internal.h"

namespace attncheck {
namespace oracle_detail {

// The exact result is a function of finite reals: a NaN or an infinity
// where it reaches some row (q of a row with an allowed key, k and v at a
// key some row of the group may use, bias at an allowed position, dout of
// a non-empty row) has no exact result, and printing one would be a guess.
// Values no row can see (--strict fixtures put NaN at masked keys) are
// allowed: they cannot change the result.
void check_finite_inputs(const Problem& p) {
  const auto reject = [](const char* tensor, int64_t a, int64_t b, int64_t c, int64_t d, double x) {
    throw InputError(fmt::format("{}[{}][{}][{}][{}] is {}, and it reaches the result: the oracle "
                                 "needs finite values wherever a row can see them",
                                 tensor, a, b, c, d, x));
  };
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      for (int64_t j = 0; j < p.tk; ++j) {
        bool seen = false;
        for (int64_t h = g * group; h < (g + 1) * group && !seen; ++h)
          for (int64_t i = 0; i < p.tq && !seen; ++i) seen = p.allowed(b, h, i, j);
        if (!seen) continue;
        for (int64_t c = 0; c < p.dk; ++c)
          if (!std::isfinite(p.k.at(b, g, j, c))) reject("k", b, g, j, c, p.k.at(b, g, j, c));
        for (int64_t c = 0; c < p.dv; ++c)
          if (!std::isfinite(p.v.at(b, g, j, c))) reject("v", b, g, j, c, p.v.at(b, g, j, c));
      }
    }
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.tq; ++i) {
        if (p.allowed_count(b, h, i) == 0) continue;
        for (int64_t c = 0; c < p.dk; ++c)
          if (!std::isfinite(p.q.at(b, h, i, c))) reject("q", b, h, i, c, p.q.at(b, h, i, c));
        if (p.bias) {
          for (int64_t j = 0; j < p.tk; ++j) {
            const double x = p.bias->at(b, h, i, j, p.tq, p.tk);
            if (p.allowed(b, h, i, j) && !std::isfinite(x)) reject("bias", b, h, i, j, x);
          }
        }
        if (!p.dout.empty()) {
          for (int64_t c = 0; c < p.dv; ++c) {
            const double x = p.dout[static_cast<size_t>(((b * p.heads + h) * p.tq + i) * p.dv + c)];
            if (!std::isfinite(x)) reject("dout", b, h, i, c, x);
          }
        }
      }
    }
  }
  if (!std::isfinite(p.scale)) throw InputError(fmt::format("scale is {}: it must be finite", p.scale));
}

}  // namespace oracle_detail

const char* tier_name(OracleResult::Tier t) {
  return t == OracleResult::Tier::enclosure ? "enclosure" : "certified";
}

OracleResult oracle(const Problem& p) {
  oracle_detail::check_finite_inputs(p);
  using oracle_detail::Decided;
  OracleResult r;
  const size_t rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const size_t scores = rows * static_cast<size_t>(p.tk);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(scores, 0.0);
  r.lse.assign(rows, -kInf);
  r.scores.assign(scores, 0.0);
  r.abs_dot.assign(scores, 0.0);
  r.row_max.assign(rows, -kInf);
  r.row_sum.assign(rows, 0.0);
  r.row_allowed.assign(rows, 0);
  r.row_empty.assign(rows, 0);
  Decided d;
  d.out.assign(r.out.size(), 0);
  d.weights.assign(scores, 0);
  d.lse.assign(rows, 0);
  const bool grads = !p.dout.empty();
  if (grads) {
    r.dq.assign(rows * static_cast<size_t>(p.dk), 0.0);
    r.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dk), 0.0);
    r.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dv), 0.0);
  }
  d.dq.assign(r.dq.size(), 0);
  d.dk.assign(r.dk.size(), 0);
  d.dv.assign(r.dv.size(), 0);

  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        int64_t n = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          if (p.allowed(b, h, i, j)) {
            ++n;
          } else {
            d.weights[weight_index(p, b, h, i, j)] = 1;  // exactly 0
          }
        }
        r.row_allowed[row] = n;
        if (n > 0) continue;
        // The normalisation is undefined: report the row, leave the zeros
        // and -inf the `zero` empty-row policy prescribes; it contributes
        // nothing to any gradient.
        r.row_empty[row] = 1;
        r.empty_rows.push_back({b, h, i});
        d.lse[row] = 1;
        for (int64_t c = 0; c < p.dv; ++c) d.out[out_index(p, b, h, i, c)] = 1;
        if (grads)
          for (int64_t c = 0; c < p.dk; ++c)
            d.dq[row * static_cast<size_t>(p.dk) + static_cast<size_t>(c)] = 1;
      }
    }
  }

  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      const bool fast = oracle_detail::fast_group(p, b, g, r, d);
      oracle_detail::exact_group(p, b, g, r, d, !fast);
    }
  }
  return r;
}

}  // namespace attncheck
