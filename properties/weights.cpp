// RowSumsToOne and MaskedWeightsAreZero: properties of the weight matrix.

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

// Whether V = I (dv = tk) costs more than the profile's cap, B H tq tk
// (dk + tk) weighted for the oracle as the size model weighs every shape.
bool identity_over_cap(const CaseContext& ctx, int64_t batch, int64_t heads, int64_t tq,
                       int64_t tk, int64_t dk) {
  return batch * heads * tq * tk * (dk + tk) * gen::reference_weight(ctx.info()) >
         gen::size_cost_cap(ctx.config().profile);
}

void judge_row_sums(CaseContext& ctx, const Case& c) {
  // Without returned weights, V = I makes output row i the weight row i,
  // each element judged by its output tolerance in that problem.
  const bool returned = ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS);
  // V = I has dv = tk: at real sizes its cost B H tq tk (dk + tk) can pass
  // the profile's cap by far (tk 2179 with 16 heads: 77M scores * values),
  // which the size model capped for dv = the drawn head dim only.
  // The oracle's share is weighted as the size model weighs it
  // (gen::reference_weight: 32 when the accumulation is f64).
  const Problem& q = c.problem;
  if (!returned && identity_over_cap(ctx, q.batch, q.heads, q.tq, q.tk, q.dk)) {
    ctx.discard("V = I beyond the profile's size cap");
  }
  // Block K/V (SPEC 1.2): V = I padded with zero columns to whole blocks
  // (dv = 32 ceil(tk / 32)); the weights are each output row's first tk.
  // The case's own problem, or V = I shared with the call (not copied).
  const auto identity =
      returned ? nullptr : std::make_shared<const Problem>(with_identity_values(c.problem));
  const Problem& p = identity ? *identity : c.problem;
  ctx.screen(p);
  ForwardResult r = identity ? ctx.call_ok(identity) : ctx.call_ok(p);
  auto [o, t] = ctx.reference(p);
  if (!returned) {
    const auto first_tk = [&p](const std::vector<double>& out) {
      if (p.dv == p.tk || out.empty()) return out;
      const auto dv = static_cast<size_t>(p.dv), tk = static_cast<size_t>(p.tk);
      std::vector<double> w;
      w.reserve(out.size() / dv * tk);
      for (size_t row = 0; row < out.size() / dv; ++row)
        w.insert(w.end(), out.begin() + static_cast<ptrdiff_t>(row * dv),
                 out.begin() + static_cast<ptrdiff_t>(row * dv + tk));
      return w;
    };
    r.weights = first_tk(r.out);
    t.weights = first_tk(t.out);
    o.weights = first_tk(o.out);
    o.weights_radius = first_tk(o.out_radius);
  }
  // With a sink (SPEC 2) the real keys' weights sum to 1 - a_sink: the
  // reference's weights summed. Each is within its radius (0 when
  // certified) plus half an f64 ulp of the exact a_ij, so that sum is
  // within u_64 sum_j a_ij + sum_j radius_ij <= u_64 + sum_j radius_ij of
  // 1 - a_sink, and rounding it to a double adds u_64 more: both charged
  // to the row's tolerance.
  const bool sink = !p.sink.empty();
  Comparison cmp;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        // binary128 sums n doubles in [0, 1] with error below n 2^-113,
        // far under any tolerance here: the check adds no error of its own.
        __float128 sum = 0, expected = sink ? 0 : 1;
        double sum_tol = sink ? 2 * unit_roundoff(DType::f64) : 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          const size_t w = weight_index(p, b, h, i, j);
          const double a = r.weights[w];
          // 0 <= a_ij <= 1, exactly: the distance outside [0, 1] is the error.
          cmp.add_element({"weights (0 <= a <= 1)", {b, h, i, j},
                           std::isnan(a) ? 0.0 : std::clamp(a, 0.0, 1.0), a, 0, 0, 0});
          sum += a;
          sum_tol += t.weights[w];
          if (sink) {
            expected += o.weights[w];
            if (!o.weights_radius.empty()) sum_tol += o.weights_radius[w];
          }
        }
        cmp.add_element({sink ? "row sum (1 - a_sink)" : "row sum", {b, h, i},
                         static_cast<double>(expected), static_cast<double>(sum), 0, sum_tol, 0});
      }
  ctx.expect(cmp, "weight rows do not sum to one");
}

// Exponent of a power of two that keeps every score finite when it replaces
// key entries: |scale| * dk * max|q| * 2^e stays 8x below the largest
// finite value of the output format, the key format and the accumulation
// format (2^e itself is then a finite key).
int big_exponent(const Problem& p, DType accum, double max_abs_q) {
  const double limit = std::min(
      {max_finite(p.dtype), format_max_value(p.kv_dtype.value_or(p.dtype)), max_finite(accum)});
  const double growth =
      std::max(1.0, std::fabs(p.scale)) * static_cast<double>(p.dk) * std::max(1.0, max_abs_q);
  return std::ilogb(limit) - std::ilogb(growth) - 3;
}

Case draw_masked(CaseContext& ctx) {
  // With a sink a row may hold only it: its keys all replaced, it must
  // still give o = 0.
  const Problem p = *gen::problem(gen::with_sinks(ctx.spec()));
  const int64_t b = *rc::gen::inRange<int64_t>(0, p.batch);
  const int64_t h = *rc::gen::inRange<int64_t>(0, p.heads);
  const int64_t i = *rc::gen::inRange<int64_t>(0, p.tq);
  return {p, {{"row", {b, h, i}}}};
}

void judge_masked(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r = ctx.call_ok(p);
  if (ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS)) {
    Comparison cmp;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j)
            if (!p.allowed(b, h, i, j))
              cmp.add_element({"weights (disallowed)", {b, h, i, j}, 0.0,
                               r.weights[weight_index(p, b, h, i, j)], 0, 0, 0});
    if (!cmp.ok()) ctx.expect(cmp, "disallowed keys have nonzero weight");
  }
  // Replace K and V at the keys one row may not see with huge values (NaN
  // under --strict); every row that sees none of them must be bitwise equal.
  const auto row = c.args.at("row").get<std::vector<int64_t>>();
  const int64_t b0 = row.at(0), h0 = row.at(1), i0 = row.at(2), g0 = p.kv_head(h0);
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < p.tk; ++j)
    if (!p.allowed(b0, h0, i0, j)) keys.push_back(j);
  double max_abs_q = 0;
  for (int64_t h = 0; h < p.heads; ++h)
    for (int64_t i = 0; i < p.tq; ++i)
      for (int64_t d = 0; d < p.dk; ++d) max_abs_q = std::max(max_abs_q, std::fabs(p.q.at(b0, h, i, d)));
  const double big_k = std::ldexp(1.0, big_exponent(p, ctx.info().precision.accum, max_abs_q));
  // Values only meet weights in [0, 1] and sums of tk terms.
  const double big_v = std::ldexp(
      1.0, std::ilogb(std::min(max_finite(p.dtype),
                               format_max_value(p.kv_dtype.value_or(p.dtype)))) -
               2 - std::ilogb(static_cast<double>(p.tk)));
  // E4M3 keys (largest 448) with a wide growth can leave 2^e below the
  // format's smallest subnormal: no large key to write there.
  const DType kv = p.kv_dtype.value_or(p.dtype);
  // A block format (SPEC 1.2) holds a power of two up to its largest value
  // (the replaced rows are rounded back to blocks below).
  const bool blocks = is_block_format(kv);
  if (blocks ? !(big_k <= format_max_value(kv) && big_v <= format_max_value(kv))
             : !representable(kv, big_k) || !representable(kv, big_v))
    ctx.discard("no large key representable in the key format");
  const bool strict = ctx.config().strict;
  expect_unseen_keys_ignored(
      ctx, p, r, b0, g0, keys,
      [&](Problem& q, int64_t j) {
        // The sign of q_i0 makes the replaced score large and positive for
        // the row itself: a max taken over masked keys shows.
        for (int64_t d = 0; d < p.dk; ++d)
          q.k.at(b0, g0, j, d) = strict ? NAN : std::copysign(big_k, p.q.at(b0, h0, i0, d));
        for (int64_t d = 0; d < p.dv; ++d) q.v.at(b0, g0, j, d) = strict ? NAN : big_v;
        // Blocks of +-big_k round to +-big_k within f16's 2^-11 (q4_0's
        // -big_k to -7/8 big_k): still large, inside the 8x margin of
        // big_exponent. NaN rows stay blocks of NaN.
        if (blocks && !strict) round_key_to_blocks(q, b0, g0, j);
      },
      fmt::format("K/V at keys disallowed for row [{}, {}, {}] (set to {} / {}) change the "
                  "output of rows that cannot see them",
                  b0, h0, i0, strict ? "NaN" : fmt::format("{}", big_k),
                  strict ? "NaN" : fmt::format("{}", big_v)));
}

// At real sizes without returned weights the judge observes them through
// V = I (dv = tk), whose cost B H tq tk (dk + tk) the size model, which
// fits the drawn dv, does not cap: the shape is shrunk to fit it here as
// fit_shape shrinks (batch, tq, heads keeping the group size, tk last),
// with the same reference weight, never discarded (SPEC 3; discarding
// left the phase with nothing judged). Without the weight, an f64
// accumulation's V = I shapes cost the oracle 32 times the cap: 70 of
// online_f64's 107 s under the thorough profile.
Case draw_row_sums(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_sinks(ctx.spec());
  if (spec.size && !ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS)) {
    gen::SizeShape& s = *spec.size;
    const auto over = [&] { return identity_over_cap(ctx, s.batch, s.heads, s.tq, s.tk, s.dk); };
    if (over()) s.batch = 1;
    while (over() && s.tq > 1) s.tq = std::max<int64_t>(1, s.tq / 2);
    while (over() && s.heads > 1) {
      if (s.kv_heads > 1) {
        const int64_t group = s.heads / s.kv_heads;
        s.kv_heads = std::max<int64_t>(1, s.kv_heads / 2);
        s.heads = s.kv_heads * group;
      } else {
        s.heads = std::max<int64_t>(1, s.heads / 2);
      }
    }
    while (over() && s.tk > 1) {
      s.tk = std::max<int64_t>(1, s.tk / 2);
      if (s.causal && s.align == Align::bottom_right) s.tq = std::min(s.tq, s.tk);
    }
  }
  return Case{*gen::problem(spec)};
}

}  // namespace

PropertyDef row_sums_property() {
  return case_property(
      "RowSumsToOne",
      "every non-empty row: 0 <= a_ij <= 1 and sum_j a_ij = 1 within the sum of the "
      "weights' tolerances",
      100, [](const ImplInfo& info, DType) { return needs_weights(info); },
      draw_row_sums, judge_row_sums, {},
      AtSize::some);
}

PropertyDef masked_weights_property() {
  PropertyDef d = case_property("MaskedWeightsAreZero",
                       "disallowed weights are exactly 0, and K/V at disallowed keys leave the "
                       "output bitwise unchanged",
                       100, always_applies, draw_masked, judge_masked, validate_row_arg,
                       AtSize::some);
  d.slice_args = {"row"};
  return d;
}

ATTNCHECK_REGISTER_PROPERTY(20, row_sums_property);
ATTNCHECK_REGISTER_PROPERTY(30, masked_weights_property);

}  // namespace attncheck
