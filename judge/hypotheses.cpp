// The hypothesis table: for each bug class of the catalogue (core/bugs.h),
// what an implementation with that bug computes for a problem, as an
// alternative result to test an output against (judge/diagnosis.cpp). Most
// are attention on a changed problem (another scale, another mask, another
// alignment), judged by the oracle; what a Problem cannot express (a finite
// mask fill, a softmax over the query axis, a softcap without its division)
// is recomputed here in long double; the precision classes keep the correct
// values and suppose a lower arithmetic.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "judge/causes.h"
#include "judge/diagnosis.h"
#include "judge/tolerance.h"
#include "core/transforms.h"
#include "core/bugs.h"

namespace attncheck {
namespace {

using bugs::Bug;

// Recomputations for what a Problem cannot express work in long double
// (a 64-bit significand on x86-64, 113 bits on aarch64 Linux): 2^11 times
// finer than f64, whose tolerances are the tightest, so its own rounding
// does not matter next to the tolerance it is judged with.
using Real = long double;

using Transform = std::function<std::optional<Problem>(const Problem&)>;

// Attention on the changed problem `a`: the oracle's result for it, judged
// with the declared traits.
Alternative on_problem(Problem a, const PrecisionTraits& declared) {
  Alternative alt;
  alt.result = oracle(a);
  alt.problem = std::move(a);
  alt.traits = declared;
  return alt;
}

// A hypothesis that is attention on another problem (on_problem).
AlternativeFn transformed(Transform transform) {
  return [transform = std::move(transform)](
             const Problem& p, const OracleResult&,
             const PrecisionTraits& declared) -> std::optional<Alternative> {
    std::optional<Problem> changed = transform(p);
    if (!changed) return std::nullopt;
    return on_problem(std::move(*changed), declared);
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

// Q rounded to f16 before q.k where the declaration rounds it to nothing
// coarser (q_cast unset or wider): the problem with Q's values rounded,
// judged by the declared traits. Nothing changes where every Q value is an
// f16 already (the plain grids of the draws).
std::optional<Alternative> q_rounded_to_f16(const Problem& p, const OracleResult&,
                                            const PrecisionTraits& declared) {
  if (declared.q_cast_kv) return std::nullopt;
  if (declared.q_cast && *declared.q_cast != DType::f32 && *declared.q_cast != DType::f64) {
    return std::nullopt;
  }
  Problem a = p;
  bool changed = false;
  for (double& x : a.q.data) {
    const double r = round_to(DType::f16, x);
    changed = changed || r != x;
    x = r;
  }
  if (!changed) return std::nullopt;
  return on_problem(std::move(a), declared);
}

// Q quantized to q8_0 with one scale per row where q8_0 is declared (per
// block of 32): ggml's quantize_row_q8_0 (d = amax / 127, n = round(x / d),
// d stored as f16) with amax taken over the row. The problem with Q's values
// so quantized, judged by the declared traits. Nothing changes for a row of
// one block, or where each block's largest magnitude is the row's.
std::optional<Alternative> q8_scale_per_row(const Problem& p, const OracleResult&,
                                            const PrecisionTraits& declared) {
  if (declared.q_cast_format(combo_of(p).kv) != DType::q8_0 || p.dk <= 32) return std::nullopt;
  Problem a = p;
  bool changed = false;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        double amax = 0;
        for (int64_t t = 0; t < p.dk; ++t) amax = std::max(amax, std::fabs(p.q_at(b, h, i, t)));
        const double d = amax / 127, id = d != 0 ? 1 / d : 0, d16 = round_to(DType::f16, d);
        for (int64_t t = 0; t < p.dk; ++t) {
          double& x = a.q.data[a.q_offset(b, h, i, t)];
          const double r = static_cast<double>(std::lround(x * id)) * d16;
          changed = changed || r != x;
          x = r;
        }
      }
  if (!changed) return std::nullopt;
  return on_problem(std::move(a), declared);
}

// The sink lost on the rows whose first allowed key is at `block` or later:
// those rows take the oracle's result without the sink, the others keep the
// correct one. One alternative per key block of the sizes kernels use that
// changes some row (dense problems: a varlen one's rows are its sequences').
std::vector<Alternative> sink_lost_past_first_block(const Problem& p,
                                                    const OracleResult& correct,
                                                    const PrecisionTraits& declared) {
  if (p.sink.empty() || p.varlen()) return {};
  Problem plain = p;
  plain.sink.clear();
  std::optional<OracleResult> without;
  std::vector<Alternative> out;
  std::vector<uint8_t> previous;
  for (const int64_t block : {16, 32, 64, 128, 256}) {
    std::vector<uint8_t> lost(correct.lse.size(), 0);
    bool any = false;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i) {
          int64_t first = p.tk;
          for (int64_t j = 0; j < p.tk && first == p.tk; ++j)
            if (p.allowed(b, h, i, j)) first = j;
          const bool l = first < p.tk && first >= block;
          lost[row_index(p, b, h, i)] = l;
          any = any || l;
        }
    if (!any) break;  // larger blocks lose fewer rows
    if (lost == previous) continue;
    previous = lost;
    if (!without) without = oracle(plain);
    Alternative a;
    a.problem = p;
    a.result = correct;
    a.traits = declared;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i) {
          const size_t row = row_index(p, b, h, i);
          if (!lost[row]) continue;
          for (int64_t d = 0; d < p.dv; ++d)
            a.result.out[out_index(p, b, h, i, d)] = without->out[out_index(p, b, h, i, d)];
          for (int64_t j = 0; j < p.tk; ++j)
            a.result.weights[weight_index(p, b, h, i, j)] =
                without->weights[weight_index(p, b, h, i, j)];
          a.result.lse[row] = without->lse[row];
          a.result.row_max[row] = without->row_max[row];
          a.result.row_sum[row] = without->row_sum[row];
        }
    out.push_back(std::move(a));
  }
  return out;
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
          scores[w] =
              static_cast<double>(c * std::tanh(t) + static_cast<Real>(p.bias_at(b, h, i, j)));
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

// ggml's tiled flash attention (ggml.md F4, F5) over 64-key tiles: the last,
// partial tile's missing keys get score -inf and then the softcap, c
// tanh(-inf) = -c, a finite score, unless a mask puts -inf back; their V rows
// hold the previous tile's rows (zeros in the first tile). As a problem: the
// keys padded to a whole tile, each phantom key with K = 0 (score c tanh(0)
// = 0) and a bias of -c after the softcap (SPEC 1), its V row the one 64 keys
// before it.
std::optional<Problem> tiled_softcap_padding(const Problem& p) {
  constexpr int64_t kTile = 64;
  if (p.softcap == 0 || p.tk % kTile == 0 || p.causal || has_window(p) || p.mask ||
      !p.key_valid.empty() || p.varlen() || p.paged) {
    return std::nullopt;
  }
  Problem a = p;
  a.tk = (p.tk / kTile + 1) * kTile;
  a.k = make_tensor(p.batch, p.kv_heads, a.tk, p.dk);
  a.v = make_tensor(p.batch, p.kv_heads, a.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < a.tk; ++j) {
        if (j < p.tk) {
          for (int64_t d = 0; d < p.dk; ++d) a.k.at(b, g, j, d) = p.k.at(b, g, j, d);
        }
        const int64_t from = j < p.tk ? j : j - kTile;  // a stale row, or none
        for (int64_t d = 0; d < p.dv; ++d)
          a.v.at(b, g, j, d) = from >= 0 ? p.v.at(b, g, from, d) : 0.0;
      }
  Broadcast<double> bias;
  bias.batch = p.bias ? p.bias->batch : 1;
  bias.heads = p.bias ? p.bias->heads : 1;
  bias.data.resize(static_cast<size_t>(bias.batch * bias.heads * p.tq * a.tk));
  for (int64_t b = 0; b < bias.batch; ++b)
    for (int64_t h = 0; h < bias.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < a.tk; ++j)
          bias.at(b, h, i, j, p.tq, a.tk) = j < p.tk ? p.bias_at(b, h, i, j) : -p.softcap;
  a.bias = std::move(bias);
  a.dout.clear();
  return a;
}

// Each bug class of the catalogue (core/bugs.h) with what it computes, in
// the catalogue's order; knows_sinks where the alternative is the oracle's
// for a transformed problem that keeps the sink as it is (the scale classes,
// the tiled padding).
struct Entry {
  Bug bug;
  AlternativeFn alternative;
  AlternativesFn candidates = {};
  EvidenceFn evidence = {};
  bool knows_sinks = false;
};

std::vector<Hypothesis> make_table() {
  const std::vector<Entry> entries = {
      {Bug::scale_one, with_scale([](const Problem&) { return 1.0; }), {}, {}, true},
      {Bug::scale_over_dk,
       with_scale([](const Problem& p) { return 1.0 / static_cast<double>(p.dk); }), {}, {},
       true},
      {Bug::scale_over_sqrt_dv,
       with_scale([](const Problem& p) { return Problem::default_scale(p.dv); }), {}, {}, true},
      {Bug::scale_argument_ignored,
       with_scale([](const Problem& p) { return Problem::default_scale(p.dk); }), {}, {}, true},
      {Bug::softmax_query_axis, softmax_over_queries},
      {Bug::alignment_swapped, transformed([](const Problem& p) -> std::optional<Problem> {
         if ((!p.causal && !has_window(p)) || p.tq == p.tk) return std::nullopt;
         Problem a = p;
         a.align = p.align == Align::top_left ? Align::bottom_right : Align::top_left;
         return a;
       })},
      {Bug::causal_strict,
       restricted([](const Problem& p) { return p.causal; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && j < p.position(i) && window_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {Bug::causal_off_by_one,
       restricted([](const Problem& p) { return p.causal; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && j <= p.position(i) + 1 && window_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {Bug::window_left_edge_excluded,
       restricted([](const Problem& p) { return p.window_left >= 0; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) &&
                           j > p.position(i) - p.window_left && right_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {Bug::window_right_off_by_one,
       restricted([](const Problem& p) { return p.window_right >= 0; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) && left_ok(p, i, j) &&
                           j <= p.position(i) + p.window_right + 1 && mask_ok(p, b, h, i, j);
                  })},
      {Bug::window_right_ignored,
       restricted([](const Problem& p) { return p.window_right >= 0; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) && left_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {Bug::mask_polarity_inverted,
       restricted([](const Problem& p) { return p.mask.has_value(); },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, b, j) && causal_ok(p, i, j) && window_ok(p, i, j) &&
                           !mask_ok(p, b, h, i, j);
                  })},
      {Bug::key_padding_on_queries,
       restricted([](const Problem& p) { return !p.key_valid.empty(); },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return (i >= p.tk || key_ok(p, b, i)) && causal_ok(p, i, j) &&
                           window_ok(p, i, j) && mask_ok(p, b, h, i, j);
                  })},
      {Bug::key_padding_batch0,
       restricted([](const Problem& p) { return !p.key_valid.empty() && p.batch > 1; },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return key_ok(p, 0, j) && causal_ok(p, i, j) && window_ok(p, i, j) &&
                           mask_ok(p, b, h, i, j);
                  })},
      {Bug::key_padding_ignored,
       restricted([](const Problem& p) { return !p.key_valid.empty(); },
                  [](const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
                    return causal_ok(p, i, j) && window_ok(p, i, j) && mask_ok(p, b, h, i, j);
                  })},
      {Bug::kv_head_modulo, transformed(kv_heads_by_modulo)},
      {Bug::bias_ignored, transformed([](const Problem& p) -> std::optional<Problem> {
         if (!p.bias) return std::nullopt;
         Problem a = p;
         a.bias.reset();
         return a;
       })},
      {Bug::softcap_ignored, transformed([](const Problem& p) -> std::optional<Problem> {
         if (p.softcap == 0) return std::nullopt;
         Problem a = p;
         a.softcap = 0;
         return a;
       })},
      {Bug::finite_mask_fill, masked_by_fill([](double) { return Real{-20}; }, false)},
      {Bug::mask_fill_1e9,
       masked_by_fill([](double s) { return static_cast<Real>(s) - Real{1e9}; }, true)},
      {Bug::softcap_without_division, softcap_without_division},
      {Bug::empty_row_nan, empty_row_nan, {}, nan_on_empty_rows},
      {Bug::undeclared_flush, undeclared_flush},
      {Bug::small_exps_dropped, nullptr, small_exps_dropped},
      {Bug::computed_in_f32, computed_in(DType::f64, DType::f32)},
      {Bug::computed_in_bf16, computed_in(DType::f32, DType::bf16)},
      {Bug::q_rounded_to_f16, q_rounded_to_f16},
      {Bug::f16_pv_sum_overflow, nullptr, {}, f16_pv_sum_overflows},
      {Bug::f16_pv_sum_rounding, nullptr, {},
       [](const Offence& o, const ImplInfo&) { return pv_sum_rounding_explains(o, DType::f16); }},
      {Bug::bf16_pv_sum_rounding, nullptr, {},
       [](const Offence& o, const ImplInfo&) { return pv_sum_rounding_explains(o, DType::bf16); }},
      {Bug::tiled_softcap_padding, transformed(tiled_softcap_padding), {}, {}, true},
      {Bug::stale_running_max, nullptr, {}, stale_running_max_explains},
      {Bug::q8_scale_per_row, q8_scale_per_row, {}, {}, true},
      {Bug::sink_lost_past_first_block, nullptr, sink_lost_past_first_block, {}, true},
      // A death, never an output: judged by the signal (death_explained).
      {Bug::illegal_instruction, nullptr, {}, [](const Offence&, const ImplInfo&) { return false; }},
  };
  std::vector<Hypothesis> table;
  for (const Entry& e : entries) {
    const bugs::BugClass& b = bugs::bug_class(e.bug);
    table.push_back({std::string(b.name), std::string(b.diagnosis), e.alternative, e.candidates,
                     e.evidence, e.knows_sinks});
  }
  return table;
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

}  // namespace attncheck
