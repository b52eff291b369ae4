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

#include "attncheck/dtype.h"
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
    throw NonFiniteInput(tensor, fmt::format("{}[{}][{}][{}][{}] is {}, and it reaches the result: "
                                             "the oracle needs finite values wherever a row can "
                                             "see them",
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
  if (!std::isfinite(p.scale)) {
    throw NonFiniteInput("scale", fmt::format("scale is {}: it must be finite", p.scale));
  }
  for (size_t h = 0; h < p.sink.size(); ++h)
    if (!std::isfinite(p.sink[h]))
      throw NonFiniteInput("sink", fmt::format("sink[{}] is {}: it must be finite", h, p.sink[h]));
  if (p.descale) {
    for (const double x : {p.descale->q, p.descale->k, p.descale->v})
      if (!std::isfinite(x))
        throw NonFiniteInput("descale", fmt::format("a descale is {}: descales must be finite", x));
  }
}

void size_forward(const Problem& p, OracleResult& r) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const size_t scores = rows * static_cast<size_t>(p.tk);
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(scores, 0.0);
  r.lse.assign(rows, -kInf);
  r.scores.assign(scores, 0.0);
  r.abs_dot.assign(scores, 0.0);
  r.row_max.assign(rows, -kInf);
  r.row_sum.assign(rows, 0.0);
  r.row_allowed.assign(rows, 0);
  r.row_empty.assign(rows, 0);
}

}  // namespace oracle_detail

const char* tier_name(OracleResult::Tier t) {
  return t == OracleResult::Tier::enclosure ? "enclosure" : "certified";
}

namespace {

// The oracle of a dense problem, dsink aside (its 128-bit terms go to
// `sums` when given).
OracleResult oracle_dense(const Problem& p, oracle_detail::DsinkSums* sums) {
  oracle_detail::check_finite_inputs(p);
  using oracle_detail::Decided;
  OracleResult r;
  oracle_detail::size_forward(p, r);
  const size_t rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const size_t scores = rows * static_cast<size_t>(p.tk);
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
        if (!p.sink.empty()) {
          // Sink-only (SPEC 1.1): Z = exp(sink_h), the sink takes all the
          // weight, o = 0 and lse = log Z = sink_h exactly; every dS_j of
          // the row is 0, so are its dQ and its dsink term. Not empty.
          const double z = p.sink[static_cast<size_t>(h)];
          r.lse[row] = z;
          r.row_max[row] = z;
          r.row_sum[row] = 1;
          d.lse[row] = 1;
          for (int64_t c = 0; c < p.dv; ++c) d.out[out_index(p, b, h, i, c)] = 1;
          if (grads)
            for (int64_t c = 0; c < p.dk; ++c)
              d.dq[row * static_cast<size_t>(p.dk) + static_cast<size_t>(c)] = 1;
          continue;
        }
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
      oracle_detail::exact_group(p, b, g, r, d, !fast, sums);
    }
  }
  return r;
}

bool with_dsink(const Problem& p) { return !p.sink.empty() && !p.dout.empty(); }

// dsink of the dense problems `parts` (p itself or its sequences), into r.
void add_dsink(const Problem& p, const std::vector<const Problem*>& parts,
               const oracle_detail::DsinkSums* sums, OracleResult& r) {
  if (p.sink.empty() || p.dout.empty()) return;
  std::vector<uint8_t> decided;
  oracle_detail::exact_dsink(parts, p.heads, r.dsink, decided, sums);
  for (int64_t h = 0; h < p.heads; ++h)
    if (!decided[static_cast<size_t>(h)]) r.uncertified.push_back({"dsink", {h}});
}

// A varlen problem, sequence by sequence (SPEC 1.1), assembled in p's
// layout: see oracle.h.
OracleResult oracle_varlen(const Problem& p) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const bool pq = p.packed_q(), pk = p.packed_k();
  const bool grads = !p.dout.empty();
  const auto heads = static_cast<size_t>(p.heads);
  const size_t rows = pq ? heads * static_cast<size_t>(p.total_q())
                         : static_cast<size_t>(p.batch * p.heads * p.tq);
  OracleResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.lse.assign(rows, -kInf);
  r.row_max.assign(rows, -kInf);
  r.row_sum.assign(rows, 0.0);
  r.row_allowed.assign(rows, 0);
  r.row_empty.assign(rows, 0);
  if (!pq) {
    const size_t scores = rows * static_cast<size_t>(p.tk);
    r.weights.assign(scores, 0.0);
    r.scores.assign(scores, 0.0);
    r.abs_dot.assign(scores, 0.0);
  }
  const int64_t key_rows = pk ? p.packed->cu_seqlens_k.back() : p.batch * p.tk;
  if (grads) {
    r.dq.assign(rows * static_cast<size_t>(p.dk), 0.0);
    r.dk.assign(static_cast<size_t>(key_rows * p.kv_heads * p.dk), 0.0);
    r.dv.assign(static_cast<size_t>(key_rows * p.kv_heads * p.dv), 0.0);
  }
  // Row (b, h, i) of q-shaped arrays with n columns; key j of k-shaped.
  const auto q_at = [&](int64_t b, int64_t h, int64_t i, int64_t c, int64_t n) {
    const int64_t x = pq ? (p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i) * p.heads + h
                         : (b * p.heads + h) * p.tq + i;
    return static_cast<size_t>(x * n + c);
  };
  const auto k_at = [&](int64_t b, int64_t g, int64_t j, int64_t c, int64_t n) {
    const int64_t x = pk ? (p.packed->cu_seqlens_k[static_cast<size_t>(b)] + j) * p.kv_heads + g
                         : (b * p.kv_heads + g) * p.tk + j;
    return static_cast<size_t>(x * n + c);
  };
  std::vector<Problem> seqs;
  seqs.reserve(static_cast<size_t>(p.batch));
  const auto sums = with_dsink(p) ? oracle_detail::make_dsink_sums(p.heads) : nullptr;
  r.sequences.resize(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t tq = p.seq_tq(b), tk = p.seq_tk(b);
    if (tq == 0) continue;  // nothing to compute
    seqs.push_back(sequence_problem(p, b));
    const Problem& sp = seqs.back();
    OracleResult& s = r.sequences[static_cast<size_t>(b)];
    s = oracle_dense(sp, sums.get());
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        const size_t rp = row_index(p, b, h, i), rs = row_index(sp, 0, h, i);
        r.lse[rp] = s.lse[rs];
        r.row_max[rp] = s.row_max[rs];
        r.row_sum[rp] = s.row_sum[rs];
        r.row_allowed[rp] = s.row_allowed[rs];
        r.row_empty[rp] = s.row_empty[rs];
        for (int64_t c = 0; c < p.dv; ++c)
          r.out[out_index(p, b, h, i, c)] = s.out[out_index(sp, 0, h, i, c)];
        if (!pq) {
          for (int64_t j = 0; j < tk; ++j) {
            const size_t wp = weight_index(p, b, h, i, j), ws = weight_index(sp, 0, h, i, j);
            r.weights[wp] = s.weights[ws];
            r.scores[wp] = s.scores[ws];
            r.abs_dot[wp] = s.abs_dot[ws];
          }
        }
        if (grads)
          for (int64_t c = 0; c < p.dk; ++c)
            r.dq[q_at(b, h, i, c, p.dk)] = s.dq[rs * static_cast<size_t>(p.dk) + static_cast<size_t>(c)];
      }
    }
    if (grads) {
      for (int64_t g = 0; g < p.kv_heads; ++g) {
        for (int64_t j = 0; j < tk; ++j) {
          for (int64_t c = 0; c < p.dk; ++c)
            r.dk[k_at(b, g, j, c, p.dk)] = s.dk[oracle_detail::kv_index(sp, 0, g, j, c, p.dk)];
          for (int64_t c = 0; c < p.dv; ++c)
            r.dv[k_at(b, g, j, c, p.dv)] = s.dv[oracle_detail::kv_index(sp, 0, g, j, c, p.dv)];
        }
      }
    }
    for (const auto& e : s.empty_rows) r.empty_rows.push_back({b, e[1], e[2]});
    for (UncertifiedValue u : s.uncertified) {
      u.index[0] = b;  // (0, ...) of the sequence is (b, ...) of p
      r.uncertified.push_back(std::move(u));
    }
  }
  std::vector<const Problem*> parts;
  for (const Problem& sp : seqs) parts.push_back(&sp);
  add_dsink(p, parts, sums.get(), r);
  return r;
}

}  // namespace

void check_oracle_inputs(const Problem& p) {
  if (!p.varlen()) return oracle_detail::check_finite_inputs(p);
  // As oracle_varlen reads them: sequence by sequence, so that the slots
  // of a paged cache no sequence uses are not looked at.
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.seq_tq(b) > 0) oracle_detail::check_finite_inputs(sequence_problem(p, b));
}

OracleResult oracle(const Problem& p) {
  if (p.varlen()) return oracle_varlen(p);
  const auto sums = with_dsink(p) ? oracle_detail::make_dsink_sums(p.heads) : nullptr;
  OracleResult r = oracle_dense(p, sums.get());
  add_dsink(p, {&p}, sums.get(), r);
  return r;
}

}  // namespace attncheck
