// AsAccurateAsBaseline (SPEC 2): on the rows the declared precision cannot
// judge (beyond SPEC 4's first-order analysis, where MatchesOracle discards
// the case), the implementation's error may be at most F times that of the
// plain algorithm in the same formats (judge/plain_baseline.h), plus T^L, the
// accuracy of a kernel that accumulates in those formats in runs short
// enough to judge and joins the runs in f32.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "judge/plain_baseline.h"
#include "judge/tolerance.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

// Near-flat scores and values of one sign: Q tiny (each element reduced
// modulo 4 and scaled by 2^-8), K reduced modulo 4, V = 1 - |v mod 16| /
// 32, in (0.5, 1]; each rounded to its tensor's format. Every weight is
// then near 1/n and every p_j v_j at most 1, so an unnormalised sum over n
// keys grows towards n, and a 16-bit accumulator of it stops growing where
// its spacing passes twice the terms: f16 by 2048 (spacing 2), bf16 by 256,
// about half the mean over 4097 keys. (Values around 1 on both sides
// would not show it: terms above 1 round up to 2 there, and the sum keeps
// its mean.) The gaps of a padded layout (NaN) stay as they are.
Problem with_flat_values(Problem p) {
  const DType q_format = p.q_dtype.value_or(p.dtype);
  const DType kv_format = p.kv_dtype.value_or(p.dtype);
  // A block format's values round with their block (SPEC 1.2), below.
  const auto each = [](Tensor& t, DType format, auto f) {
    for (double& x : t.data)
      if (std::isfinite(x)) x = is_block_format(format) ? f(x) : round_to(format, f(x));
  };
  each(p.q, q_format, [](double x) { return std::ldexp(std::fmod(x, 4.0), -8); });
  each(p.k, kv_format, [](double x) { return std::fmod(x, 4.0); });
  each(p.v, kv_format, [](double x) { return 1 - std::ldexp(std::fabs(std::fmod(x, 16.0)), -5); });
  // Rounded per block, V's values stay in [1/2, 1] (q4_0's steps of 1/8
  // there): still one side of 1, as the stagnation this is for needs.
  round_kv_to_blocks(p);
  return p;
}

// The usual draws of MatchesOracle (every declared serving part but the
// packed and paged layouts: the baseline is of a dense problem), and the
// flat values above: every small problem, and the real-size shapes whose
// number is 2 mod 3 (the phase numbers its shapes, generators.h: variant;
// 2 mod 3 falls on the CI list's decode over 4097 keys, and on sinks and
// descales alike, which follow the number mod 2 and mod 4).
Case draw_baseline(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
  spec.serving &= ~(ATTNCHECK_FEATURE_PACKED | ATTNCHECK_FEATURE_PAGED_KV);
  Problem p = *gen::problem(spec);
  if (!spec.size || spec.size->variant % 3 == 2) p = with_flat_values(std::move(p));
  return {p};
}

std::optional<std::string> dense_only(const Problem& p) {
  if (p.varlen()) return "AsAccurateAsBaseline judges dense problems only (not packed or paged)";
  return std::nullopt;
}

// One judged row: its errors, the allowance, and the worst element.
struct RowVerdict {
  int64_t b = 0, h = 0, i = 0, d = 0;
  double impl_error = 0, base_error = 0, t_limit = 0, allowance = 0, budget = 0;
};

void judge_baseline(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r = ctx.call_ok(p);
  const PrecisionTraits t = ctx.judging_precision(p);
  // The rows MatchesOracle could not judge: ill-conditioned under the
  // usual tolerance, and not under T^L (whose only such rows overflow a
  // format: beyond any bound).
  const CaseContext::BeyondReference ref = ctx.reference_beyond(p);
  const OracleResult& o = ref.o;
  const Tolerances& usual = ref.usual;
  const Tolerances& at_limit = ref.at_limit;
  if (usual.ill_conditioned_rows == 0) {
    ctx.passed(0);  // nothing beyond the declared precision: MatchesOracle's
    return;
  }
  const std::vector<double> base = baseline_out(p, t);
  const double factor = ctx.config().property_options.baseline_factor;
  const double inf = std::numeric_limits<double>::infinity();
  // T^L takes every first-order quantity at most at the limit L: a kernel
  // whose runs are short enough to judge. A row whose largest score errs by
  // more than L in a single rounding to the narrowest declared score format
  // (u |m| > L: a bf16 score stage from |m| = 25.6 on, f16 from 204.8, f32
  // from 1.6e6; the value regimes at size put rows near -150 and a
  // dominant key near +130) has no such run: every score near the max
  // carries an error above L from its first rounding, which T^L does not
  // cover and which the baseline, rounding S once, can undercut by luck
  // (two scores 2.07 apart rounded to 2 apart by it and to 1 by a bf16
  // accumulation that is exactly as declared). Such rows are not judged;
  // a case with no other row is discarded with that reason.
  const double u_score = std::max(unit_roundoff(t.score_format()), unit_roundoff(t.s_cast_format()));
  RowVerdict worst;
  int64_t judged = 0, failed = 0, scores_too_large = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        if (!usual.ill_conditioned[row] || at_limit.ill_conditioned[row] || o.row_empty[row]) {
          continue;
        }
        if (u_score * std::fabs(o.row_max[row]) > kFirstOrderLimit) {
          ++scores_too_large;
          continue;
        }
        ++judged;
        // Against an enclosure (mid +- radius) the implementation's error
        // is taken at its smallest and the baseline's at its largest.
        RowVerdict v;
        v.b = b;
        v.h = h;
        v.i = i;
        double impl_worst = -1;
        for (int64_t d = 0; d < p.dv; ++d) {
          const size_t k = out_index(p, b, h, i, d);
          const double mid = o.out[k];
          const double radius = o.out_radius.empty() ? 0.0 : o.out_radius[k];
          const double e_impl = std::isfinite(r.out[k])
                                    ? std::max(0.0, std::fabs(r.out[k] - mid) - radius)
                                    : inf;
          // A baseline that is not finite bounds nothing: no allowance
          // below infinity (the plain algorithm fails there too).
          const double e_base = std::isfinite(base[k]) ? std::fabs(base[k] - mid) + radius : inf;
          if (e_impl > impl_worst) {
            impl_worst = e_impl;
            v.d = d;
          }
          v.base_error = std::max(v.base_error, e_base);
          if (!std::isfinite(at_limit.out[k])) {
            ctx.fail(fmt::format("T^L of out[{}, {}, {}, {}] is {}: a defect of attncheck, not of "
                                 "the implementation (please report it)",
                                 b, h, i, d, at_limit.out[k]));
          }
          v.t_limit = std::max(v.t_limit, at_limit.out[k]);
        }
        v.impl_error = impl_worst;
        v.allowance = factor * v.base_error + v.t_limit;
        v.budget = v.allowance > 0 ? v.impl_error / v.allowance : v.impl_error > 0 ? inf : 0.0;
        if (std::isnan(v.budget)) v.budget = 0;  // both infinite: the plain algorithm fails too
        if (v.budget > 1) ++failed;
        if (judged == 1 || v.budget > worst.budget) worst = v;
      }
  if (judged == 0 && scores_too_large > 0) {
    ctx.discard(fmt::format("scores too large for the declared score format (u |max score| > {}: "
                            "beyond T^L)",
                            kFirstOrderLimit));
  }
  if (failed == 0) {
    ctx.passed(worst.budget);
    return;
  }
  const size_t k = out_index(p, worst.b, worst.h, worst.i, worst.d);
  const double ratio = worst.base_error > 0 ? worst.impl_error / worst.base_error : inf;
  ctx.fail(fmt::format(
      "{} of {} rows beyond the declared precision are less accurate than the baseline allows; "
      "worst: row [{}, {}, {}] ({} allowed keys): the implementation's error max_t |o^ - o| = "
      "{:.6g} is {:.3g} times the baseline's {:.6g}; allowed {} x {:.6g} + max_t T^L {:.6g} = "
      "{:.6g} (budget used {:.3g}); worst element out[{}, {}, {}, {}]: exact {:.9g}, got "
      "{:.9g}, baseline {:.9g}\n{}",
      failed, judged, worst.b, worst.h, worst.i, o.row_allowed[row_index(p, worst.b, worst.h, worst.i)],
      worst.impl_error, ratio, worst.base_error, factor, worst.base_error, worst.t_limit,
      worst.allowance, worst.budget, worst.b,
      worst.h, worst.i, worst.d, o.out[k], r.out[k], base[k],
      o.tier == OracleResult::Tier::enclosure
          ? fmt::format("  (reference: the enclosure tier of SPEC 4; exact = {:.9g} +- {:.3g})\n",
                        o.out[k], o.out_radius[k])
          : ""));
}

}  // namespace

PropertyDef as_accurate_as_baseline_property() {
  PropertyDef d = case_property(
      "AsAccurateAsBaseline",
      "on rows beyond the declared precision, max_t |o^ - o| <= F x the baseline's error (the "
      "plain algorithm in the declared formats) + T^L",
      20, always_applies, draw_baseline, judge_baseline, {}, AtSize::all);
  d.not_a_case = rows_have_keys_and(dense_only);
  d.judges_beyond_precision = true;
  return d;
}

ATTNCHECK_REGISTER_PROPERTY(250, as_accurate_as_baseline_property);

}  // namespace attncheck
