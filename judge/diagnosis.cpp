// The hypothesis table, and the test of every hypothesis against an output.
//
// A hypothesis H explains an output o^ of problem p when
//   (1) o^ matches H's result r_H element by element within the tolerance
//       of SPEC 4 computed for H's result (the implementation's traits, or
//       the lower precision H supposes), and
//   (2) r_H is told apart from the correct result r: at some element of a
//       row that is well-conditioned for p, |r_H - r| exceeds the sum of the
//       two tolerances, so no output lies within both. (Precision
//       hypotheses keep r_H = r and need o^ to fail the declared tolerance
//       instead.)
// A correct implementation is within its tolerance of r everywhere, so by
// (2) it is never within H's tolerance of r_H at the telling element: it is
// never given a diagnosis, and a hypothesis that changes nothing on this
// problem (alignment swapped when tq == tk) is never reported.
//
// A reported error is explained by the hypotheses under which the rows the
// message names are empty (diagnose_error), and the runner keeps a name
// only when a second failing problem confirms it (the FailureRecord
// overload of diagnose_failure).

#include "attncheck/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <utility>

#include "attncheck/compare.h"
#include "attncheck/tolerance.h"
#include "attncheck/transforms.h"

namespace attncheck {
namespace {

// Recomputations for what a Problem cannot express work in long double
// (a 64-bit significand on x86-64, 113 bits on aarch64 Linux): 2^11 times
// finer than f64, whose tolerances are the tightest, so its own rounding
// does not matter next to the tolerance it is judged with.
using Real = long double;

using Transform = std::function<std::optional<Problem>(const Problem&)>;

// A hypothesis that is attention on another problem: its exact result is the
// oracle's for that problem, judged with the declared traits.
AlternativeFn transformed(Transform transform) {
  return [transform = std::move(transform)](
             const Problem& p, const OracleResult&,
             const PrecisionTraits& declared) -> std::optional<Alternative> {
    std::optional<Problem> changed = transform(p);
    if (!changed) return std::nullopt;
    Alternative a;
    a.result = oracle(*changed);
    a.problem = std::move(*changed);
    a.traits = declared;
    return a;
  };
}

// The problem with scale `scale(p)` in place of p.scale.
AlternativeFn with_scale(std::function<double(const Problem&)> scale) {
  return transformed([scale = std::move(scale)](const Problem& p) -> std::optional<Problem> {
    const double s = scale(p);
    if (s == p.scale) return std::nullopt;
    Problem a = p;
    a.scale = s;
    return a;
  });
}

// The constraints SPEC 1 AND-s, one by one, so a rule can replace one.
bool key_ok(const Problem& p, int64_t b, int64_t j) {
  return p.key_valid.empty() || p.key_valid[static_cast<size_t>(b * p.tk + j)] != 0;
}
bool causal_ok(const Problem& p, int64_t i, int64_t j) { return p.causal_band(i).contains(j); }
bool window_ok(const Problem& p, int64_t i, int64_t j) { return p.window_band(i).contains(j); }
bool left_ok(const Problem& p, int64_t i, int64_t j) {
  return p.window_left < 0 || j >= p.position(i) - p.window_left;
}
bool right_ok(const Problem& p, int64_t i, int64_t j) {
  return p.window_right < 0 || j <= p.position(i) + p.window_right;
}
bool mask_ok(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return !p.mask || p.mask->at(b, h, i, j, p.tq, p.tk) != 0;
}

using KeyRule = std::function<bool(const Problem&, int64_t b, int64_t h, int64_t i, int64_t j)>;

// A hypothesis about which keys a query sees: the problem whose only
// constraint is the explicit mask of `rule`, where `applies(p)`.
AlternativeFn restricted(std::function<bool(const Problem&)> applies, KeyRule rule) {
  return transformed([applies = std::move(applies),
                      rule = std::move(rule)](const Problem& p) -> std::optional<Problem> {
    if (!applies(p)) return std::nullopt;
    Broadcast<uint8_t> mask;
    mask.batch = p.batch;
    mask.heads = p.heads;
    mask.data.resize(static_cast<size_t>(p.score_elements()));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j)
            mask.at(b, h, i, j, p.tq, p.tk) = rule(p, b, h, i, j) ? 1 : 0;
    Problem a = p;
    a.key_valid.clear();
    a.causal = false;
    a.window_left = a.window_right = -1;
    a.mask = std::move(mask);
    return a;
  });
}

// GQA with query head h reading K/V head h % kv_heads: the problem with each
// query head's K/V copied out under that mapping.
std::optional<Problem> kv_heads_by_modulo(const Problem& p) {
  if (p.kv_heads <= 1 || p.kv_heads >= p.heads) return std::nullopt;  // both maps agree
  return expand_kv_heads(p, [](const Problem& q, int64_t h) { return h % q.kv_heads; });
}

// Softmax attention over given scores (s_ij at every key, [b][h][tq][tk])
// and the allowed keys of `a`, in long double, with the row quantities
// tolerances() reads.
OracleResult softmax_of_scores(const Problem& a, std::vector<double> scores,
                               std::vector<double> abs_dot) {
  const auto rows = static_cast<size_t>(a.batch * a.heads * a.tq);
  const Real inf = std::numeric_limits<Real>::infinity();
  OracleResult r;
  r.out.assign(rows * static_cast<size_t>(a.dv), 0.0);
  r.weights.assign(rows * static_cast<size_t>(a.tk), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  r.row_max.assign(rows, -std::numeric_limits<double>::infinity());
  r.row_sum.assign(rows, 0.0);
  r.row_allowed.assign(rows, 0);
  r.row_empty.assign(rows, 0);
  std::vector<Real> e(static_cast<size_t>(a.tk));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t i = 0; i < a.tq; ++i) {
        const size_t row = row_index(a, b, h, i);
        Real m = -inf;
        int64_t n = 0;
        for (int64_t j = 0; j < a.tk; ++j)
          if (a.allowed(b, h, i, j)) {
            m = std::max(m, static_cast<Real>(scores[weight_index(a, b, h, i, j)]));
            ++n;
          }
        if (n == 0) {
          r.row_empty[row] = 1;
          r.empty_rows.push_back({b, h, i});
          continue;
        }
        Real l = 0;
        for (int64_t j = 0; j < a.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          e[jj] = a.allowed(b, h, i, j)
                      ? std::exp(static_cast<Real>(scores[weight_index(a, b, h, i, j)]) - m)
                      : 0;
          l += e[jj];
        }
        for (int64_t j = 0; j < a.tk; ++j)
          r.weights[weight_index(a, b, h, i, j)] =
              static_cast<double>(e[static_cast<size_t>(j)] / l);
        for (int64_t d = 0; d < a.dv; ++d) {
          Real c = 0;
          for (int64_t j = 0; j < a.tk; ++j)
            c += e[static_cast<size_t>(j)] / l * static_cast<Real>(a.v.at(b, a.kv_head(h), j, d));
          r.out[out_index(a, b, h, i, d)] = static_cast<double>(c);
        }
        r.row_max[row] = static_cast<double>(m);
        r.row_sum[row] = static_cast<double>(l);
        r.row_allowed[row] = n;
        r.lse[row] = static_cast<double>(m + std::log(l));
      }
  r.scores = std::move(scores);
  r.abs_dot = std::move(abs_dot);
  return r;
}

// Masking by a finite score instead of -inf: every key takes part, the
// disallowed ones with score fill(s_ij). `from_dot` says whether the filled
// score still comes from the dot product (an additive mask) or is a
// constant (so carries no dot-product error).
AlternativeFn masked_by_fill(std::function<Real(double)> fill, bool from_dot) {
  return [fill = std::move(fill), from_dot](
             const Problem& p, const OracleResult& correct,
             const PrecisionTraits& declared) -> std::optional<Alternative> {
    std::vector<double> scores = correct.scores, abs_dot = correct.abs_dot;
    bool any = false;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j) {
            if (p.allowed(b, h, i, j)) continue;
            any = true;
            const size_t w = weight_index(p, b, h, i, j);
            scores[w] = static_cast<double>(fill(scores[w]));
            if (!from_dot) abs_dot[w] = 0;
          }
    if (!any) return std::nullopt;
    Alternative a;
    a.problem = p;
    a.problem.key_valid.clear();
    a.problem.causal = false;
    a.problem.window_left = a.problem.window_right = -1;
    a.problem.mask.reset();
    a.result = softmax_of_scores(a.problem, std::move(scores), std::move(abs_dot));
    a.traits = declared;
    return a;
  };
}

// Each key's column normalised over the queries that may see it, instead of
// each query's row over its keys. The tolerance is computed as for rows from
// the column weights (their logit and normalisation terms); lse is left out,
// as the hypothesis does not say which normaliser an implementation reports.
std::optional<Alternative> softmax_over_queries(const Problem& p, const OracleResult& correct,
                                                const PrecisionTraits& declared) {
  Alternative a;
  a.problem = p;
  a.result = correct;
  a.traits = declared;
  a.predicts_lse = false;
  const Real inf = std::numeric_limits<Real>::infinity();
  std::vector<Real> w(static_cast<size_t>(p.tq * p.tk));  // one slice, [i][j]
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const auto at = [&](int64_t i, int64_t j) { return static_cast<size_t>(i * p.tk + j); };
      for (int64_t j = 0; j < p.tk; ++j) {
        Real m = -inf, z = 0;
        for (int64_t i = 0; i < p.tq; ++i)
          if (p.allowed(b, h, i, j))
            m = std::max(m, static_cast<Real>(correct.scores[weight_index(p, b, h, i, j)]));
        for (int64_t i = 0; i < p.tq; ++i) {
          w[at(i, j)] =
              p.allowed(b, h, i, j)
                  ? std::exp(static_cast<Real>(correct.scores[weight_index(p, b, h, i, j)]) - m)
                  : 0;
          z += w[at(i, j)];
        }
        for (int64_t i = 0; i < p.tq; ++i) {
          if (z > 0) w[at(i, j)] /= z;
          a.result.weights[weight_index(p, b, h, i, j)] = static_cast<double>(w[at(i, j)]);
        }
      }
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d) {
          Real c = 0;
          for (int64_t j = 0; j < p.tk; ++j)
            c += w[at(i, j)] * static_cast<Real>(p.v.at(b, p.kv_head(h), j, d));
          a.result.out[out_index(p, b, h, i, d)] = static_cast<double>(c);
        }
    }
  return a;
}

// The correct values under the traits of `lower` arithmetic, for an
// implementation that declares `declared_accum` accumulation: the output
// must fit the former and fail the latter.
AlternativeFn computed_in(DType declared_accum, DType lower) {
  return [declared_accum, lower](const Problem& p, const OracleResult& correct,
                                 const PrecisionTraits& declared) -> std::optional<Alternative> {
    if (declared.accum != declared_accum) return std::nullopt;
    Alternative a;
    a.problem = p;
    a.result = correct;
    a.traits = declared;
    a.traits.accum = lower;
    if (unit_roundoff(a.traits.p_cast) < unit_roundoff(lower)) a.traits.p_cast = lower;
    // The lower format's exp is at best within an ulp (glibc's expf).
    a.traits.exp_ulps = std::max<uint32_t>(declared.exp_ulps, 1);
    a.same_values = true;
    return a;
  };
}

bool has_window(const Problem& p) { return p.window_left >= 0 || p.window_right >= 0; }

// The correct values judged as if every format flushed (SPEC 4: results
// below twice the smallest normal may become 0), for an implementation that
// declares fewer flushing formats: the output must fit the former and fail
// the declared traits.
std::optional<Alternative> undeclared_flush(const Problem& p, const OracleResult& correct,
                                            const PrecisionTraits& declared) {
  const uint32_t all = kFtzAccum | kFtzPCast | kFtzOut;
  if (declared.flushes(kFtzAccum) && declared.flushes(kFtzPCast) && declared.flushes(kFtzOut)) {
    return std::nullopt;
  }
  Alternative a;
  a.problem = p;
  a.result = correct;
  a.traits = declared;
  a.traits.ftz_formats = all;
  a.same_values = true;
  return a;
}

// An exp that returns 0 below some threshold far above any flush: keys
// with s_j - m at or below x are dropped from their rows (their weight 0,
// the row normalised over the rest). The threshold is not known, so each
// distinct s_j - m is a candidate, largest first, between ln(2^-24) (above
// it a dropped weight is sparsification, not underflow) and twice the
// accumulation format's smallest normal (below it the flush hypothesis
// speaks). At most kMaxThresholds, so a problem with many tiny weights
// costs a bounded number of recomputations.
std::vector<Alternative> small_exps_dropped(const Problem& p, const OracleResult& correct,
                                            const PrecisionTraits& declared) {
  constexpr size_t kMaxThresholds = 16;
  const double hi = std::log(0x1p-24);
  const double lo = std::log(underflow_unit(declared.accum, true));
  std::vector<double> xs;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        if (correct.row_empty[row]) continue;
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!p.allowed(b, h, i, j)) continue;
          const double x = correct.scores[weight_index(p, b, h, i, j)] - correct.row_max[row];
          if (x < hi && x >= lo) xs.push_back(x);
        }
      }
  std::sort(xs.begin(), xs.end(), std::greater<>());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  if (xs.size() > kMaxThresholds) xs.resize(kMaxThresholds);
  std::vector<Alternative> out;
  for (const double threshold : xs) {
    Alternative a;
    a.problem = p;
    Broadcast<uint8_t> mask;
    mask.batch = p.batch;
    mask.heads = p.heads;
    mask.data.resize(static_cast<size_t>(p.score_elements()));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j) {
            const double x = correct.scores[weight_index(p, b, h, i, j)] -
                             correct.row_max[row_index(p, b, h, i)];
            mask.at(b, h, i, j, p.tq, p.tk) = p.allowed(b, h, i, j) && x > threshold;
          }
    a.problem.key_valid.clear();
    a.problem.causal = false;
    a.problem.window_left = a.problem.window_right = -1;
    a.problem.mask = std::move(mask);
    a.result = softmax_of_scores(a.problem, correct.scores, correct.abs_dot);
    a.traits = declared;
    out.push_back(std::move(a));
  }
  return out;
}

// Softcap written as c tanh(t) instead of c tanh(t / c): scores recomputed
// in long double from t = scale (q . k). An error dt of t moves c tanh(t)
// by c sech^2(t) dt, which the tolerance's dot-product term (gamma_dot
// S_j) must carry: S_j is scaled by that factor where it exceeds 1.
std::optional<Alternative> softcap_without_division(const Problem& p, const OracleResult& correct,
                                                    const PrecisionTraits& declared) {
  if (p.softcap == 0 || p.softcap == 1) return std::nullopt;  // c = 1: the same function
  std::vector<double> scores = correct.scores, abs_dot = correct.abs_dot;
  const Real c = static_cast<Real>(p.softcap);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          Real dot = 0;
          for (int64_t d = 0; d < p.dk; ++d)
            dot += static_cast<Real>(p.q.at(b, h, i, d)) *
                   static_cast<Real>(p.k.at(b, p.kv_head(h), j, d));
          const Real t = static_cast<Real>(p.scale) * dot;
          const size_t w = weight_index(p, b, h, i, j);
          scores[w] = static_cast<double>(c * std::tanh(t) +
                                          static_cast<Real>(p.bias_at(b, h, i, j)));
          const Real sech = 1 / std::cosh(t);
          abs_dot[w] *= static_cast<double>(std::max(Real{1}, c * sech * sech));
        }
  Alternative a;
  a.problem = p;
  a.result = softmax_of_scores(p, std::move(scores), std::move(abs_dot));
  a.traits = declared;
  return a;
}

// A row without allowed keys computed as softmax over all -inf scores:
// exp(-inf - -inf) = NaN in its output and every weight (the correct result
// elsewhere). lse is not predicted (m + log l, or -inf, both occur).
std::optional<Alternative> empty_row_nan(const Problem& p, const OracleResult& correct,
                                         const PrecisionTraits& declared) {
  if (correct.empty_rows.empty()) return std::nullopt;
  Alternative a;
  a.problem = p;
  a.result = correct;
  a.traits = declared;
  a.predicts_lse = false;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [b, h, i] : correct.empty_rows) {
    for (int64_t d = 0; d < p.dv; ++d) a.result.out[out_index(p, b, h, i, d)] = nan;
    for (int64_t j = 0; j < p.tk; ++j) a.result.weights[weight_index(p, b, h, i, j)] = nan;
  }
  return a;
}

std::vector<Hypothesis> make_table() {
  return {
      {"scale_one", "output matches attention with scale = 1 (missing 1/sqrt(dk)?)",
       with_scale([](const Problem&) { return 1.0; })},
      {"scale_over_dk", "output matches attention with scale = 1/dk (1/dk in place of 1/sqrt(dk)?)",
       with_scale([](const Problem& p) { return 1.0 / static_cast<double>(p.dk); })},
      {"scale_over_sqrt_dv",
       "output matches attention with scale = 1/sqrt(dv) (the value dim in place of dk?)",
       with_scale([](const Problem& p) { return Problem::default_scale(p.dv); })},
      {"scale_argument_ignored",
       "output matches attention with the default scale 1/sqrt(dk) (the scale argument ignored?)",
       with_scale([](const Problem& p) { return Problem::default_scale(p.dk); })},
      {"softmax_query_axis",
       "output matches a softmax over the query axis (each key's column normalised instead of "
       "each query's row?)",
       softmax_over_queries},
      {"alignment_swapped",
       "output matches the causal mask and window with the other alignment (top-left and "
       "bottom-right swapped?)",
       transformed([](const Problem& p) -> std::optional<Problem> {
         if ((!p.causal && !has_window(p)) || p.tq == p.tk) return std::nullopt;
         Problem a = p;
         a.align = p.align == Align::top_left ? Align::bottom_right : Align::top_left;
         return a;
       })},
      {"causal_strict", "output matches a strict causal mask j < p_i (the diagonal masked?)",
       restricted([](const Problem& p) { return p.causal; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && j < p.position(i) && window_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {"causal_off_by_one",
       "output matches a causal mask allowing j <= p_i + 1 (causal mask off by one?)",
       restricted([](const Problem& p) { return p.causal; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && j <= p.position(i) + 1 && window_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {"window_left_edge_excluded",
       "output matches a window without its left edge, p_i - left < j (window off by one?)",
       restricted([](const Problem& p) { return p.window_left >= 0; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) &&
                           j > p.position(i) - p.window_left && right_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {"window_right_off_by_one",
       "output matches a window reaching one key further right, j <= p_i + right + 1 (window "
       "off by one?)",
       restricted([](const Problem& p) { return p.window_right >= 0; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) && left_ok(p, i, j) &&
                           j <= p.position(i) + p.window_right + 1 && mask_ok(p, b, h, i, j);
                  })},
      {"window_right_ignored",
       "output matches the window without its right bound (right bound ignored?)",
       restricted([](const Problem& p) { return p.window_right >= 0; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) && left_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {"mask_polarity_inverted",
       "output matches the explicit mask inverted (1 read as masked, 0 as allowed?)",
       restricted([](const Problem& p) { return p.mask.has_value(); },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) && window_ok(p, i, j) &&
                           !mask_ok(p, b, h, i, j);
                  })},
      {"key_padding_on_queries",
       "output matches key padding applied to the queries (key_valid[b][i] masking query rows "
       "instead of keys?)",
       restricted([](const Problem& p) { return !p.key_valid.empty(); },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return (i >= p.tk || key_ok(p, b, i)) && causal_ok(p, i, j) &&
                           window_ok(p, i, j) && mask_ok(p, b, h, i, j);
                  })},
      {"key_padding_batch0",
       "output matches batch 0's key padding used for every batch entry (batch index of "
       "key_valid ignored?)",
       restricted([](const Problem& p) { return !p.key_valid.empty() && p.batch > 1; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, 0, j) && causal_ok(p, i, j) && window_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {"key_padding_ignored",
       "output matches attention without the key padding (key_valid never read?)",
       restricted([](const Problem& p) { return !p.key_valid.empty(); },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return causal_ok(p, i, j) && window_ok(p, i, j) && mask_ok(p, b, h, i, j);
                  })},
      {"kv_head_modulo",
       "output matches GQA with query head h reading K/V head h % kv_heads (instead of "
       "h / (heads / kv_heads)?)",
       transformed(kv_heads_by_modulo)},
      {"bias_ignored", "output matches attention without the bias (bias ignored?)",
       transformed([](const Problem& p) -> std::optional<Problem> {
         if (!p.bias) return std::nullopt;
         Problem a = p;
         a.bias.reset();
         return a;
       })},
      {"softcap_ignored", "output matches attention without the softcap (softcap ignored?)",
       transformed([](const Problem& p) -> std::optional<Problem> {
         if (p.softcap == 0) return std::nullopt;
         Problem a = p;
         a.softcap = 0;
         return a;
       })},
      {"finite_mask_fill",
       "output matches masking with score -20 at disallowed keys (a finite fill in place of "
       "-inf?)",
       masked_by_fill([](double) { return Real{-20}; }, false)},
      {"mask_fill_1e9",
       "output matches masking by adding -1e9 to disallowed scores (an additive mask in place "
       "of -inf?)",
       masked_by_fill([](double s) { return static_cast<Real>(s) - Real{1e9}; }, true)},
      {"softcap_without_division",
       "output matches the softcap written as c * tanh(s) (the division by c left out?)",
       softcap_without_division},
      {"empty_row_nan",
       "output is NaN exactly on the rows without allowed keys (softmax over all -inf scores, "
       "the empty-row policy not applied?)",
       empty_row_nan},
      {"undeclared_flush",
       "output fits the declared arithmetic with flush-to-zero but not without it (results "
       "below twice the smallest normal flushed, not declared?)",
       undeclared_flush},
      {"small_exps_dropped",
       "output matches attention with the weights of keys far below the row's max dropped (an "
       "exp that returns 0 early, far above the format's underflow?)",
       nullptr, small_exps_dropped},
      {"computed_in_f32",
       "output fits f32 arithmetic's tolerance but not the declared f64 one (computed in f32?)",
       computed_in(DType::f64, DType::f32)},
      {"computed_in_bf16",
       "output fits bf16 arithmetic's tolerance but not the declared f32 one (computed in "
       "bf16?)",
       computed_in(DType::f32, DType::bf16)},
  };
}

// A NaN matches only an alternative's NaN (empty_row_nan predicts them); the
// correct result never has one.
bool within(double got, double expected, double tol) {
  return got == expected || (std::isnan(got) && std::isnan(expected)) ||
         std::fabs(got - expected) <= tol;
}

// One array of an output against a hypothesis.
struct ArrayCheck {
  const std::vector<double>& got;
  const std::vector<double>& correct;
  const std::vector<double>& correct_tol;
  const std::vector<double>& alternative;
  const std::vector<double>& alternative_tol;
  size_t per_row;  // elements per row (b, h, i), for the row's conditioning
};

struct Verdict {
  bool matches = true;      // every element within the alternative's tolerance
  bool told_apart = false;  // condition (2) of the header comment
};

void judge(const ArrayCheck& a, const std::vector<uint8_t>& ill_conditioned, bool same_values,
           Verdict& v) {
  for (size_t k = 0; k < a.got.size(); ++k) {
    if (!within(a.got[k], a.alternative[k], a.alternative_tol[k])) {
      v.matches = false;
      return;
    }
    // The correct tolerance of an ill-conditioned row is not trusted (and
    // not computed): such a row can not tell anything apart.
    if (ill_conditioned[k / a.per_row]) continue;
    const bool apart = same_values ? !within(a.got[k], a.correct[k], a.correct_tol[k])
                                   : a.alternative[k] != a.correct[k] &&
                                         !(std::fabs(a.alternative[k] - a.correct[k]) <=
                                           pairwise_tolerance(a.alternative_tol[k],
                                                              a.correct_tol[k]));
    if (apart) v.told_apart = true;
  }
}

}  // namespace

const std::vector<Hypothesis>& hypothesis_table() {
  static const std::vector<Hypothesis> table = make_table();
  return table;
}

const Hypothesis* find_hypothesis(std::string_view name) {
  for (const Hypothesis& h : hypothesis_table())
    if (h.name == name) return &h;
  return nullptr;
}

namespace {

// The alternatives of hypothesis h for p; none where it can not be computed.
std::vector<Alternative> alternatives_of(const Hypothesis& h, const Problem& p,
                                         const OracleResult& correct,
                                         const PrecisionTraits& declared) {
  std::vector<Alternative> alts;
  try {
    if (h.candidates) {
      alts = h.candidates(p, correct, declared);
    } else if (auto alt = h.alternative(p, correct, declared)) {
      alts.push_back(std::move(*alt));
    }
  } catch (const std::exception&) {
    alts.clear();  // a problem the hypothesis can not be computed for explains nothing
  }
  return alts;
}

// An error reported on rows that have allowed keys, explained by the
// hypotheses under which exactly those rows are empty: the reported rows R
// (named in the message) are rows H empties, at least one of them has an
// allowed key (else the error is the right answer), and R is every row H
// empties, or the first of them in (b, h, i) order (a front end that stops
// at the first empty row it finds, as attncheck's own do). Whether a row
// is empty depends on the masks alone, so no tolerance takes part.
std::vector<std::string> diagnose_error(const Problem& p, const std::string& message,
                                        const ImplInfo& info) {
  std::vector<std::string> names;
  const std::vector<std::array<int64_t, 3>> reported = reported_rows(message, p);
  if (reported.empty()) return names;
  const OracleResult correct = oracle(p);
  const auto row_of = [&](const std::array<int64_t, 3>& r) {
    return row_index(p, r[0], r[1], r[2]);
  };
  if (std::all_of(reported.begin(), reported.end(),
                  [&](const auto& r) { return correct.row_empty[row_of(r)] != 0; })) {
    return names;
  }
  const auto explains = [&](const Alternative& alt) {
    const std::vector<uint8_t>& empty = alt.result.row_empty;
    if (empty.size() != correct.row_empty.size()) return false;
    if (!std::all_of(reported.begin(), reported.end(),
                     [&](const auto& r) { return empty[row_of(r)] != 0; })) {
      return false;
    }
    std::vector<size_t> all, named;
    for (size_t row = 0; row < empty.size(); ++row)
      if (empty[row]) all.push_back(row);
    for (const auto& r : reported) named.push_back(row_of(r));
    std::sort(named.begin(), named.end());
    return named == all || (reported.size() == 1 && row_of(reported[0]) == all.front());
  };
  for (const Hypothesis& h : hypothesis_table()) {
    const std::vector<Alternative> alts = alternatives_of(h, p, correct, info.precision);
    if (std::any_of(alts.begin(), alts.end(), explains)) names.push_back(h.name);
  }
  return names;
}

}  // namespace

std::vector<std::array<int64_t, 3>> reported_rows(std::string_view message, const Problem& p) {
  // "b=1, h=0, i=2" (attncheck's own front ends) or "[1, 0, 2]" (the JSON
  // report's empty_rows), spaces free around '=' and ','.
  static const std::regex named(R"(b\s*=\s*(\d+)\s*,\s*h\s*=\s*(\d+)\s*,\s*i\s*=\s*(\d+))");
  static const std::regex bracketed(R"(\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\])");
  std::vector<std::array<int64_t, 3>> rows;
  const std::string text(message);
  for (const std::regex* re : {&named, &bracketed}) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), *re);
         it != std::sregex_iterator(); ++it) {
      std::array<int64_t, 3> r{};
      bool fits = true;
      for (size_t k = 0; k < 3; ++k) {
        // More than 9 digits is no row of a problem that fits in memory.
        const std::string digits = (*it)[k + 1].str();
        fits = fits && digits.size() <= 9;
        if (fits) r[k] = std::stoll(digits);
      }
      if (!fits || r[0] >= p.batch || r[1] >= p.heads || r[2] >= p.tq) continue;
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    }
  }
  return rows;
}

std::vector<std::string> diagnose(const Problem& p, const ForwardResult& got,
                                  const ImplInfo& info) {
  std::vector<std::string> names;
  // The error path knows dense problems without sinks only (a packed
  // problem's rows are numbered per sequence, a sink fills every row).
  if (got.status == Status::error && !p.varlen() && p.sink.empty()) {
    return diagnose_error(p, got.error, info);
  }
  if (got.status != Status::ok) return names;
  if (p.varlen()) {
    // Packed and paged problems: each sequence is diagnosed as the dense
    // problem it is judged as; the first one a hypothesis explains speaks.
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.seq_tq(b) == 0) continue;
      names = diagnose(sequence_problem(p, b), sequence_result(p, got, b), info);
      if (!names.empty()) return names;
    }
    return names;
  }
  // The hypotheses' alternative results know neither sinks nor descales
  // (version 2, SPEC 1.1): no claim there rather than a wrong one. Input
  // formats (fp8, mixed) change no value: the stored values are the
  // logical ones without descales.
  const bool descaled = p.descale && (p.descale->q != 1 || p.descale->k != 1 || p.descale->v != 1);
  if (!p.sink.empty() || descaled) return names;
  const OracleResult correct = oracle(p);
  if (got.out.size() != correct.out.size()) return names;
  const Tolerances tol = tolerances(p, correct, info.precision);
  const bool weights =
      info.has(ATTNCHECK_FEATURE_WEIGHTS) && got.weights.size() == correct.weights.size();
  const bool lse = info.has(ATTNCHECK_FEATURE_LSE) && got.lse.size() == correct.lse.size();
  // Values the oracle reports uncertified are still within an ulp of the
  // exact ones, far inside any tolerance: good enough to name a suspect.
  const auto explains = [&](const Alternative& alt) {
    const Tolerances alt_tol = tolerances(alt.problem, alt.result, alt.traits);
    // Beyond the first-order analysis the alternative's tolerance is not
    // trusted: no claim either way.
    if (alt_tol.ill_conditioned_rows > 0) return false;
    const OracleResult& r = alt.result;
    Verdict v;
    judge({got.out, correct.out, tol.out, r.out, alt_tol.out, static_cast<size_t>(p.dv)},
          tol.ill_conditioned, alt.same_values, v);
    if (v.matches && weights) {
      judge({got.weights, correct.weights, tol.weights, r.weights, alt_tol.weights,
             static_cast<size_t>(p.tk)},
            tol.ill_conditioned, alt.same_values, v);
    }
    if (v.matches && lse && alt.predicts_lse) {
      judge({got.lse, correct.lse, tol.lse, r.lse, alt_tol.lse, 1}, tol.ill_conditioned,
            alt.same_values, v);
    }
    return v.matches && v.told_apart;
  };
  for (const Hypothesis& h : hypothesis_table()) {
    const std::vector<Alternative> alts = alternatives_of(h, p, correct, info.precision);
    if (std::any_of(alts.begin(), alts.end(), explains)) names.push_back(h.name);
  }
  return names;
}

std::vector<std::string> diagnose_failure(const Implementation& impl, const Problem& p) {
  try {
    return diagnose(p, impl.forward(p), impl.info());
  } catch (...) {
    // An implementation that throws, or a problem the oracle refuses, has
    // no output to explain.
    return {};
  }
}

Problem nearby_problem(const Problem& p) {
  Problem n = p;
  // A fixed seed: the same failure gets the same diagnosis every time.
  std::mt19937_64 rng(0x6e65617262795ULL);
  std::uniform_real_distribution<double> u(-1.0 / 8, 1.0 / 8);
  const auto perturb = [&](Tensor& t, DType format) {
    for (double& x : t.data) {
      const double moved = x + u(rng) * std::fabs(x) + u(rng);
      x = round_to(format, moved);
    }
  };
  perturb(n.q, p.q_dtype.value_or(p.dtype));
  perturb(n.k, p.kv_dtype.value_or(p.dtype));
  perturb(n.v, p.kv_dtype.value_or(p.dtype));
  return n;
}

namespace {

// Above this size (Problem::score_elements() * (dk + dv)) the unshrunk case
// is not diagnosed (each hypothesis computes the oracle once, some of them
// 16 times): the property generators' small problems stay below 2^17, a
// real-size case far above; the nearby problem stands in for it.
constexpr int64_t kMaxConfirmCost = int64_t{1} << 18;

int64_t cost(const Problem& p) { return p.score_elements() * (p.dk + p.dv); }

}  // namespace

std::vector<std::string> diagnose_failure(const Implementation& impl, const FailureRecord& f) {
  const Problem* diagnosed = &f.shrunk;
  std::vector<std::string> names = diagnose_failure(impl, f.shrunk);
  if (names.empty() && f.shrunk_call) {
    diagnosed = &*f.shrunk_call;
    names = diagnose_failure(impl, *f.shrunk_call);
  }
  if (names.empty()) return names;
  // A shrunk problem can be degenerate (one query, one key block): a
  // hypothesis is kept only when a second failing problem agrees.
  std::vector<std::string> confirming;
  if (f.unshrunk && cost(*f.unshrunk) <= kMaxConfirmCost) {
    confirming = diagnose_failure(impl, *f.unshrunk);
    if (f.unshrunk_call && cost(*f.unshrunk_call) <= kMaxConfirmCost) {
      for (std::string& n : diagnose_failure(impl, *f.unshrunk_call))
        confirming.push_back(std::move(n));
    }
  } else {
    try {
      confirming = diagnose_failure(impl, nearby_problem(*diagnosed));
    } catch (...) {
      confirming.clear();  // a format round_to refuses: nothing confirms
    }
  }
  std::erase_if(names, [&](const std::string& n) {
    return std::find(confirming.begin(), confirming.end(), n) == confirming.end();
  });
  return names;
}

std::string describe_diagnosis(const std::vector<std::string>& names) {
  if (names.empty()) return "  diagnosis: no known bug class explains it\n";
  std::string s;
  for (const std::string& name : names) {
    const Hypothesis* h = find_hypothesis(name);
    s += "  diagnosis: " + (h ? h->description : name) + "\n";
  }
  return s;
}

}  // namespace attncheck
