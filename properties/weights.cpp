// RowSumsToOne and MaskedWeightsAreZero: properties of the weight matrix.

#include <cmath>

#include <fmt/format.h>

#include "properties/harness.h"

namespace attncheck {
namespace {

void row_sums(CaseContext& ctx) {
  const Problem p = *gen::problem(ctx.spec());
  const ForwardResult r = ctx.call_ok(p);
  const auto [o, t] = ctx.reference(p);
  Comparison c;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        // binary128 sums n doubles in [0, 1] with error below n 2^-113,
        // far under any tolerance here: the check adds no error of its own.
        __float128 sum = 0;
        double sum_tol = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          const size_t w = weight_index(p, b, h, i, j);
          const double a = r.weights[w];
          ElementCheck range;  // 0 <= a_ij <= 1, exactly
          range.array = "weights (0 <= a <= 1)";
          range.index = {b, h, i, j};
          range.got = a;
          range.expected = std::isnan(a) ? 0.0 : std::clamp(a, 0.0, 1.0);
          range.tolerance = 0;
          c.add_element(range);
          sum += a;
          sum_tol += t.weights[w];
        }
        ElementCheck e;
        e.array = "row sum";
        e.index = {b, h, i};
        e.expected = 1.0;
        e.got = static_cast<double>(sum);
        e.tolerance = sum_tol;
        c.add_element(e);
      }
  ctx.expect(p, c, "weight rows do not sum to one");
}

// Exponent of a power of two that keeps every score finite when it replaces
// key entries: |scale| * dk * max|q| * 2^e stays 4x below the largest
// finite value of both the dtype and the accumulation format.
int big_exponent(const Problem& p, DType accum, double max_abs_q) {
  const double limit = std::min(max_finite(p.dtype), max_finite(accum));
  const double growth = std::max(1.0, std::fabs(p.scale)) *
                        static_cast<double>(p.dk) * std::max(1.0, max_abs_q);
  return std::ilogb(limit) - std::ilogb(growth) - 3;
}

void masked_weights(CaseContext& ctx) {
  const Problem p = *gen::problem(ctx.spec());
  const ForwardResult r = ctx.call_ok(p);
  Comparison c;
  const bool has_weights = ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!has_weights || p.allowed(b, h, i, j)) continue;
          ElementCheck e;
          e.array = "weights (disallowed)";
          e.index = {b, h, i, j};
          e.got = r.weights[weight_index(p, b, h, i, j)];
          e.expected = 0;
          e.tolerance = 0;
          c.add_element(e);
        }
  if (!c.ok()) ctx.expect(p, c, "disallowed keys have nonzero weight");

  // Replace K and V at the keys one row may not see with huge values (NaN
  // under --strict); every row that sees none of them must be bitwise equal.
  const int64_t b0 = *rc::gen::inRange<int64_t>(0, p.batch);
  const int64_t h0 = *rc::gen::inRange<int64_t>(0, p.heads);
  const int64_t i0 = *rc::gen::inRange<int64_t>(0, p.tq);
  const int64_t g0 = p.kv_head(h0);
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < p.tk; ++j)
    if (!p.allowed(b0, h0, i0, j)) keys.push_back(j);
  if (keys.empty()) {
    ctx.passed(0);
    return;
  }
  double max_abs_q = 0;
  for (int64_t h = 0; h < p.heads; ++h)
    for (int64_t i = 0; i < p.tq; ++i)
      for (int64_t d = 0; d < p.dk; ++d) max_abs_q = std::max(max_abs_q, std::fabs(p.q.at(b0, h, i, d)));
  const double big_k = std::ldexp(1.0, big_exponent(p, ctx.info().precision.accum, max_abs_q));
  // Values only meet weights in [0, 1] and sums of tk terms.
  const double big_v = std::ldexp(1.0, std::ilogb(max_finite(p.dtype)) - 2 - std::ilogb(static_cast<double>(p.tk)));
  const bool strict = ctx.config().strict;
  Problem changed = p;
  for (int64_t j : keys) {
    // The sign of q_i0 makes the replaced score large and positive for the
    // row itself: a max taken over masked keys shows.
    for (int64_t d = 0; d < p.dk; ++d) {
      changed.k.at(b0, g0, j, d) = strict ? NAN : std::copysign(big_k, p.q.at(b0, h0, i0, d));
    }
    for (int64_t d = 0; d < p.dv; ++d) changed.v.at(b0, g0, j, d) = strict ? NAN : big_v;
  }
  const ForwardResult r2 = ctx.call_ok(changed);
  Comparison unchanged;
  for (int64_t h = 0; h < p.heads; ++h) {
    if (p.kv_head(h) != g0) continue;
    for (int64_t i = 0; i < p.tq; ++i) {
      bool sees_changed = false;
      for (int64_t j : keys) sees_changed = sees_changed || p.allowed(b0, h, i, j);
      if (sees_changed) continue;
      for (int64_t d = 0; d < p.dv; ++d) {
        ElementCheck e;
        e.array = "out (after changing K/V at disallowed keys)";
        e.index = {b0, h, i, d};
        e.expected = r.out[out_index(p, b0, h, i, d)];
        e.got = r2.out[out_index(p, b0, h, i, d)];
        e.tolerance = 0;  // bitwise: +0 and -0 compare equal
        unchanged.add_element(e);
      }
    }
  }
  ctx.expect(p, unchanged, "K/V at disallowed keys change the output",
             {{"row", {b0, h0, i0}},
              {"changed_keys", keys},
              {"k_value", strict ? "nan" : nlohmann::json(big_k)},
              {"v_value", strict ? "nan" : nlohmann::json(big_v)}});
}

}  // namespace

PropertyDef row_sums_property() {
  PropertyDef d{"RowSumsToOne",
                "every non-empty row: 0 <= a_ij <= 1 and sum_j a_ij = 1 within the sum of "
                "the weights' tolerances",
                100, [](const ImplInfo& info, DType) { return needs_weights(info); }, {}};
  d.run = [d](const Implementation& impl, DType dtype, const RunConfig& config) {
    return run_cases(d, impl, dtype, config, row_sums);
  };
  return d;
}

PropertyDef masked_weights_property() {
  PropertyDef d{"MaskedWeightsAreZero",
                "disallowed weights are exactly 0, and K/V at disallowed keys leave the "
                "output bitwise unchanged",
                100, [](const ImplInfo&, DType) { return std::optional<std::string>(); }, {}};
  d.run = [d](const Implementation& impl, DType dtype, const RunConfig& config) {
    return run_cases(d, impl, dtype, config, masked_weights);
  };
  return d;
}

}  // namespace attncheck
