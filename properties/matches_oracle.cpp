// MatchesOracle and ExtremeScoresStayFinite: the implementation's values
// against the oracle's, element by element, within the SPEC 4 tolerance.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

void judge_against_oracle(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  ctx.screen(p);
  const ForwardResult r = ctx.call_ok(p);
  for (size_t k = 0; k < r.out.size(); ++k) {
    if (!std::isfinite(r.out[k])) {
      // Where the declared arithmetic itself overflows (Q past its q_cast
      // format, scores past s_cast's) the case is beyond the declared
      // precision, as the tolerance says.
      if (overflows_declared_formats(p, ctx.judging_precision(p)))
        ctx.discard(kBeyondPrecision);
      const auto idx = unflatten(k, array_shape(ArrayKind::out, p));
      ctx.fail(fmt::format("out[{}] = {} is not finite", fmt::join(idx, ","), r.out[k]));
    }
  }
  if (p.varlen()) {
    judge_sequences_against_oracle(ctx, p, r);
    return;
  }
  const auto [o, t] = ctx.reference(p);
  Comparison cmp;
  compare_kinds(cmp, returned_kinds(ctx.info(), kForwardKinds), p, o, r, t,
                CompareMode::tolerance);
  ctx.expect(cmp, "values differ from the oracle's");
}

// Largest |scale * q.k| of the problem's logical values (the stored ones
// times the descales), in double (only used to aim).
double max_abs_score(const Problem& p) {
  const Descales ds = p.descale.value_or(Descales{});
  double m = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < p.dk; ++d) dot += p.q.at(b, h, i, d) * p.k.at(b, p.kv_head(h), j, d);
          m = std::max(m, std::fabs(p.scale * ds.q * ds.k * dot));
        }
  return m;
}

// The largest power-of-two shift that keeps every element of q within the
// largest finite value of q's own storage format (q_dtype, which may be
// narrower than the output's: an f16 q under an f32 output holds 65504 at
// most); INT_MAX for an all-zero q.
int max_q_shift(const Problem& p, const PrecisionTraits& t) {
  const DType format = p.q_dtype.value_or(p.dtype);
  // Q rounded to a narrower format before q.k (q_cast) reaches only as far.
  double limit = max_finite(format);
  if (const std::optional<DType> q_cast = t.q_cast_format(combo_of(p).kv)) {
    // Q8_0's block scale is an f16, largest / 127: the largest element it
    // holds is 127 times f16's largest finite.
    const double cast_limit =
        is_block_format(*q_cast) ? 127 * max_finite(DType::f16) : max_finite(*q_cast);
    limit = std::min(limit, cast_limit);
  }
  double q_max = 0;
  for (double v : p.q.data)
    if (std::isfinite(v)) q_max = std::max(q_max, std::fabs(v));
  if (q_max == 0) return std::numeric_limits<int>::max();
  int shift = std::ilogb(limit) - std::ilogb(q_max);
  if (std::ldexp(q_max, shift) > limit) --shift;
  return shift;
}

// Scores are pushed to 2^x with x between the exp-overflow point of the
// accumulation format (e^88.7 and e^709.8 overflow f32 and f64) and
// 0.01 / u, past which the first-order bound of SPEC 4 no longer holds; u
// is the unit roundoff of the coarser of the accumulation format and the
// format scores are stored in (s_cast: a bf16 score of 2^x errs by 2^(x-9),
// 3 u_s |s| in the logit error D).
struct ScoreExponents {
  int lo, hi;
};

// Q rounded to Q8_0 (q_cast, SPEC 4.1) errs by up to half its block's
// scale, max |q| / 254 per element: bf16's unit roundoff (2^-8) of the
// largest |q| in the logit error D. 0 for any other q_cast, whose u_qc
// the tolerance charges against S_j as the sums' own roundoff. With K/V in
// `kv`: a declaration of q_cast = kv (ggml's, q_cast_kv) rounds Q to Q8_0
// exactly when K/V are blocks, as the tolerance reads it (q_cast_format).
double q_block_roundoff(const PrecisionTraits& t, DType kv) {
  const std::optional<DType> q = t.q_cast_format(kv);
  return q && is_block_format(*q) ? unit_roundoff(DType::bf16) : 0.0;
}

// By stage (SPEC 4.1): the exp overflows in the softmax's format, and u is
// the coarsest of the q.k sums', the stored scores' and the softmax's
// (4 u_sm |s_j| in D), and Q's block rounding with K/V in `kv`.
ScoreExponents extreme_exponents(const PrecisionTraits& t, DType kv) {
  const DType accum = t.softmax_format();
  const int lo = accum == DType::f64 ? 10 : accum == DType::f16 ? 4 : 7;  // 2^lo > overflow point
  const double u = std::max({unit_roundoff(t.score_format()), unit_roundoff(accum),
                             unit_roundoff(t.s_cast_format()), q_block_roundoff(t, kv)});
  return {lo, std::ilogb(0.01 / u)};
}

// The K/V formats a run in output dtype `d` draws: those of the declared
// combinations with that output, and d itself where d is declared alone.
std::vector<DType> kv_formats(const ImplInfo& info, DType d) {
  std::vector<DType> kvs;
  if (info.supports(d)) kvs.push_back(d);
  for (const DTypeCombo& c : info.combos)
    if (c.out == d && std::find(kvs.begin(), kvs.end(), c.kv) == kvs.end()) kvs.push_back(c.kv);
  if (kvs.empty()) kvs.push_back(d);
  return kvs;
}

// Where the range is empty for every K/V format the run draws, no extreme
// score is judgeable: every case would be discarded as ill-conditioned, so
// the property is skipped with why.
std::optional<std::string> extreme_skip_reason(const ImplInfo& info, DType d) {
  const PrecisionTraits& t = info.precision;
  const std::vector<DType> kvs = kv_formats(info, d);
  for (DType kv : kvs) {
    const auto [lo, hi] = extreme_exponents(t, kv);
    if (lo <= hi) return std::nullopt;
  }
  const DType kv = kvs.front();
  const auto [lo, hi] = extreme_exponents(t, kv);
  if (q_block_roundoff(t, kv) > std::max(unit_roundoff(t.s_cast_format()),
                                         unit_roundoff(t.softmax_format()))) {
    return fmt::format(
        "not judgeable under the declared precision: Q rounded to {} (about 2^-8 of the largest "
        "|q|) keeps the first-order analysis of SPEC 4 only for scores below 2^{}, beneath the "
        "exp-overflow point 2^{} of {} accumulation",
        dtype_name(*t.q_cast_format(kv)), hi, lo, dtype_name(t.softmax_format()));
  }
  const bool by_scores = unit_roundoff(t.s_cast_format()) > unit_roundoff(t.softmax_format());
  return fmt::format(
      "not judgeable under the declared precision: {} {} keeps the first-order analysis of SPEC "
      "4 only for scores below 2^{} (0.01 / u), beneath the exp-overflow point 2^{} of {} "
      "accumulation",
      by_scores ? "storing scores in" : "accumulating in",
      dtype_name(by_scores ? t.s_cast_format() : t.softmax_format()), hi, lo,
      dtype_name(t.softmax_format()));
}

Case draw_extreme(CaseContext& ctx) {
  gen::GenSpec spec = ctx.spec();
  spec.features &= ~ATTNCHECK_FEATURE_SOFTCAP;  // a softcap bounds every score
  Problem p = *gen::problem(spec);
  const auto [lo, hi] = extreme_exponents(ctx.info().precision, combo_of(p).kv);
  if (max_abs_score(p) == 0) {  // small cases are all zeros: give them a score
    p.q.at(0, 0, 0, 0) = 1;
    // A block of K (SPEC 1.2) holds a 1 among other values only on some
    // scales: the rest of its block is cleared, so it stays a block.
    if (kv_in_blocks(p))
      for (int64_t t = 1; t < kBlockValues; ++t) p.k.at(0, 0, 0, t) = 0;
    p.k.at(0, 0, 0, 0) = 1;
  }
  const double m = max_abs_score(p);
  if (m == 0) ctx.discard("no nonzero score to scale");
  // Aim only as high as q's storage format reaches (an f16 q of
  // an f32 output was scaled to 2^24 and 65536, which f16 cannot hold):
  // the score exponent x takes the shift x - ilogb(m) of q.
  const int top = static_cast<int>(
      std::min<int64_t>(hi, int64_t{std::ilogb(m)} + max_q_shift(p, ctx.info().precision)));
  if (top < lo) ctx.discard("q's format cannot reach an extreme score");
  const int x = *rc::gen::resize(100, rc::gen::inRange(lo, top + 1));
  const int shift = x - std::ilogb(m);
  for (double& v : p.q.data) v = std::ldexp(v, shift);  // exact unless it leaves the format
  // In q's own format (q_dtype) and finite (NaN only in the gaps of a
  // padded layout): a shift down may leave the subnormal range, and the
  // problem must stay one a fixture can hold.
  const DType q_format = p.q_dtype.value_or(p.dtype);
  for (double v : p.q.data) {
    if (std::isinf(v) || !representable(q_format, v)) {
      ctx.discard(fmt::format("scaled q not representable in {}", dtype_name(q_format)));
    }
  }
  return {p, {{"score_exponent", x}, {"q_scaled_by_power_of_two", shift}}};
}

}  // namespace

PropertyDef matches_oracle_property() {
  return case_property(
      "MatchesOracle",
      "o, and a / lse where returned, are within the SPEC 4 tolerance of the oracle's", 100,
      always_applies,
      // Every serving part the implementation declares (SPEC 1.1).
      [](CaseContext& ctx) { return Case{*gen::problem(gen::with_serving_parts(ctx.spec()))}; },
      judge_against_oracle, {}, AtSize::all);
}

PropertyDef extreme_scores_property() {
  return case_property(
      "ExtremeScoresStayFinite",
      "scores from the exp-overflow point up to 0.01/u_a give finite outputs that match the "
      "oracle, masked keys included",
      100, extreme_skip_reason, draw_extreme, judge_against_oracle, [](const Fixture& f) {
        // Not read by the judge (the problem holds the scaled q), but kept
        // as a record of how it was drawn.
        const ArgsCheck a(f.args, f.problem, {"q_scaled_by_power_of_two", "score_exponent"});
        a.integer("q_scaled_by_power_of_two", -100000, 100000, "exponent");
        a.integer("score_exponent", -100000, 100000, "exponent");
      });
}

ATTNCHECK_REGISTER_PROPERTY(10, matches_oracle_property);
ATTNCHECK_REGISTER_PROPERTY(110, extreme_scores_property);

}  // namespace attncheck
