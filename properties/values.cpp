// Properties of the weighted sum of values: ConstantValuesReproduced,
// OutputInConvexHull, ValueLinearity.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

Case draw_constant(CaseContext& ctx) {
  Problem p = *gen::problem(gen::with_sinks(ctx.spec()));
  // Every key of a (b, K/V head) slice gets the value vector of its first key.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 1; j < p.tk; ++j)
        for (int64_t d = 0; d < p.dv; ++d) p.v.at(b, g, j, d) = p.v.at(b, g, 0, d);
  return {p};
}

void judge_constant(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  ctx.screen(p);
  const ForwardResult r = ctx.call_ok(p);
  const auto [o, t] = ctx.reference(p);
  // With a sink (SPEC 2) o_i = (1 - a_sink) v: the reference's output,
  // which is that exact value within its radius (0 when certified; the
  // comparison charges it). Without, v itself, exactly.
  const bool sink = !p.sink.empty();
  std::vector<double> expected(o.out.size());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d) {
          const size_t k = out_index(p, b, h, i, d);
          expected[k] = sink ? o.out[k] : p.v.at(b, p.kv_head(h), 0, d);
        }
  Comparison cmp;
  compare_array(cmp, ArrayKind::out, p, expected, r.out, t.out, CompareMode::tolerance,
                sink ? "(1 - a_sink) v" : "", {},
                sink ? o.out_radius : std::vector<double>{});
  ctx.expect(cmp, "equal values are not reproduced");
}

void judge_convex_hull(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  ctx.screen(p);
  const ForwardResult r = ctx.call_ok(p);
  const auto [o, t] = ctx.reference(p);
  Comparison cmp;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d) {
          // With a sink, the hull of the values and 0 (SPEC 2): the sink is
          // a key whose value is 0.
          double lo = p.sink.empty() ? INFINITY : 0.0, hi = p.sink.empty() ? -INFINITY : 0.0;
          for (int64_t j = 0; j < p.tk; ++j) {
            if (!p.allowed(b, h, i, j)) continue;
            lo = std::min(lo, p.v.at(b, p.kv_head(h), j, d));
            hi = std::max(hi, p.v.at(b, p.kv_head(h), j, d));
          }
          const size_t k = out_index(p, b, h, i, d);
          // Distance outside [lo, hi], against the output's own tolerance.
          cmp.add_element({"out (outside [min, max] of allowed v)", {b, h, i, d},
                           std::clamp(r.out[k], lo, hi), r.out[k], 0, t.out[k], 0});
        }
  ctx.expect(cmp, "outputs leave the convex hull of the values");
}

constexpr double kCoefficients[] = {1.0, -1.0, 2.0, 0.5, -2.0, 0.25};

// V2 is V1 with the keys of each slice in reverse order (of a packed or
// paged problem: the stored key rows each sequence reads first, so a shared
// page is rewritten once); the coefficients are powers of two, so a f1 and
// b f2 are exact.
Problem with_values(const Problem& p, double a, double b) {
  Problem out = p;
  std::vector<std::array<int64_t, 3>> slice;  // (b, g, j) of one (b, g) slice
  const auto flush = [&] {
    const size_t n = slice.size();
    for (size_t k = 0; k < n; ++k) {
      const auto [b1, g1, j1] = slice[k];
      const auto [b2, g2, j2] = slice[n - 1 - k];
      for (int64_t d = 0; d < p.dv; ++d)
        out.v.data[p.kv_offset(p.v, b1, g1, j1, d)] =
            a * p.v_at(b1, g1, j1, d) + b * p.v_at(b2, g2, j2, d);
    }
    slice.clear();
  };
  for_each_read_key(p, [&](int64_t bb, int64_t g, int64_t j) {
    if (!slice.empty() && (slice.back()[0] != bb || slice.back()[1] != g)) flush();
    slice.push_back({bb, g, j});
  });
  flush();
  return out;
}

// Why coefficients a, b make p1 no case of ValueLinearity, or "". a V1 + b
// V2 must be stored exactly in the K/V format (SPEC 2: the sums exactly
// representable). And the logical values (stored times v_descale) of V1,
// V2 and a V1 + b V2, whose convex combinations the three outputs are, must
// stay finite in the output format, with room for an unnormalised P.V sum
// (sum_j p_j v_j, p_j <= 1, over up to tk keys, before the division by l)
// as the generator leaves it: a drawn v = 2^125, v_descale 2, a = b = 2
// is 2^128, which every correct f32 kernel returns as inf. V2 holds V1's
// values, so V1 speaks for both.
std::string linearity_defect(const Problem& p1, double a, double b) {
  const Problem p3 = with_values(p1, a, b);
  const DType kv = p1.kv_dtype.value_or(p1.dtype);
  // A block format holds a V1 + b V2 when every block of it is one (SPEC
  // 1.2); rounding it back would make the sum another one.
  if (is_block_format(kv) && !kv_blocks_exact(p3)) {
    return fmt::format("a V1 + b V2 not representable in {} (a = {}, b = {}): a block of it is "
                       "no {} block",
                       dtype_name(kv), a, b, dtype_name(kv));
  }
  for (double x : p3.v.data)
    if (!std::isnan(x) && !is_block_format(kv) && !representable(kv, x)) {
      return fmt::format("a V1 + b V2 not representable in {} (a = {}, b = {}: {})", dtype_name(kv),
                         a, b, x);
    }
  const double v_descale = p1.descale ? p1.descale->v : 1.0;
  const double limit = max_finite(p1.dtype);
  const double keys = static_cast<double>(std::max<int64_t>(p1.tk, 1));
  std::string defect;
  const auto check = [&](const Problem& p, const char* what) {
    for_each_read_key(p, [&](int64_t bb, int64_t g, int64_t j) {
      for (int64_t d = 0; d < p.dv && defect.empty(); ++d) {
        const double stored = p.v_at(bb, g, j, d);
        if (std::isnan(stored) || !(std::fabs(v_descale * stored) * keys > limit)) continue;
        defect = fmt::format(
            "the logical value {} (v_descale {} times {} = {}, a = {}, b = {}) times tk = {} is "
            "beyond the largest finite {} {}: a correct kernel's output or P.V sum overflows",
            v_descale * stored, v_descale, what, stored, a, b, p1.tk, dtype_name(p1.dtype), limit);
      }
    });
  };
  check(p1, "V1");
  if (defect.empty()) check(p3, "a V1 + b V2");
  return defect;
}

// V in a block format (SPEC 1.2): a V1 + b V2 is a block where the two
// rows' blocks share a scale S and a n1 + b n2 is an integer the format
// holds; drawn values (each row its own scales) almost never do. So V is
// re-quantized, a deterministic function of the drawn problem and a, b (so
// shrinking and replay see the same values), to one f16 scale per block
// column shared by every key row, with integers n = f k, f the power of
// two that makes f a and f b integers (a and b are powers of two) and |k|
// <= levels = the largest integer L with f max(1, |a| + |b|) L <= the
// format's largest integer (127; 7): then n itself and a n1 + b n2 = f (a
// k1 + b k2) are integers within it, and V2 (V1's keys reversed) shares
// the scales.
void share_value_scales(Problem& p, DType kv, double a, double b) {
  int f = 1;
  while (std::trunc(a * f) != a * f || std::trunc(b * f) != b * f) f *= 2;
  const double span = f * std::max(1.0, std::fabs(a) + std::fabs(b));
  const int levels = static_cast<int>(std::floor(block_int_max(kv) / span));
  share_block_scales(p, true, levels, f);
}

Case draw_linearity(CaseContext& ctx) {
  // Every declared serving part (o = sum a_j v_j with a sink too) in half
  // the cases on small problems, problems without them in the other half
  // (KeyTranslationInvariance says why); at real sizes dense, as a packed
  // or paged problem's reference there would be the certified oracle.
  const bool serving = !ctx.spec().size && *rc::gen::arbitrary<bool>();
  gen::GenSpec spec = serving ? gen::with_serving_parts(ctx.spec()) : ctx.spec();
  Problem p = *gen::problem(spec);
  // An fp8 V at real size (4 significant bits at most) almost never gives
  // sums a V1 + b V2 it holds exactly, and every draw was discarded: small
  // integers, whose sums with these coefficients it holds, at the same
  // shape and formats (the shape's number fixes them).
  const DType kv = p.kv_dtype.value_or(p.dtype);
  if (spec.size && (kv == DType::e4m3 || kv == DType::e5m2)) {
    spec.size->small_values = true;
    p = *gen::problem(spec);
  }
  // q4_0's integers (-8 .. 7) hold no a n1 + b n2 with a = +-2, b = 1/4
  // and n1, n2 not 0 (8 n1 + n2 needs |n| >= 1 and 9 > 8): a quarter is
  // left out of its coefficients.
  const int coefficients = kv == DType::q4_0 ? 5 : 6;
  const double a = kCoefficients[*rc::gen::inRange(0, coefficients)];
  const double b = kCoefficients[*rc::gen::inRange(0, coefficients)];
  if (is_block_format(kv)) share_value_scales(p, kv, a, b);
  return {p, {{"a", a}, {"b", b}, {"v2", "the keys of V in reverse order"}}};
}

void judge_linearity(CaseContext& ctx, const Case& c) {
  const Problem& p1 = c.problem;
  ctx.screen(p1);
  const double a = c.args.at("a"), b = c.args.at("b");
  if (const std::string defect = linearity_defect(p1, a, b); !defect.empty()) {
    // One reason per kind, so that discards count together.
    ctx.discard(defect.starts_with("a V1") ? "a V1 + b V2 not representable"
                                           : "v_descale (a V1 + b V2) beyond the output format");
  }
  const Problem p2 = with_values(p1, 0.0, 1.0);
  const Problem p3 = with_values(p1, a, b);
  const ForwardResult r1 = ctx.call_ok(p1), r2 = ctx.call_ok(p2), r3 = ctx.call_ok(p3);
  const auto [o1, t1] = ctx.reference(p1);
  const auto [o2, t2] = ctx.reference(p2);
  const auto [o3, t3] = ctx.reference(p3);
  std::vector<double> expected(r3.out.size()), tol(r3.out.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    expected[k] = a * r1.out[k] + b * r2.out[k];
    // Each answer within its tolerance of the exact value, and the exact
    // values are linear; one rounding of the sum of the two exact products.
    tol[k] = t3.out[k] + std::fabs(a) * t1.out[k] + std::fabs(b) * t2.out[k] +
             unit_roundoff(DType::f64) * std::fabs(expected[k]);
  }
  Comparison cmp;
  compare_array(cmp, ArrayKind::out, p1, expected, r3.out, tol, CompareMode::tolerance,
                "f(a V1 + b V2) vs a f(V1) + b f(V2)");
  ctx.expect(cmp, "the output is not linear in the values");
}

}  // namespace

PropertyDef constant_values_property() {
  return case_property("ConstantValuesReproduced",
                       "if every allowed v_j equals v then o_i = v within tolerance", 100,
                       always_applies, draw_constant, judge_constant, {}, AtSize::some);
}

PropertyDef convex_hull_property() {
  return case_property(
      "OutputInConvexHull",
      "each o_i[d] lies within [min, max] of the allowed v_j[d], widened by its own tolerance",
      100, always_applies,
      [](CaseContext& ctx) { return Case{*gen::problem(gen::with_sinks(ctx.spec()))}; },
      judge_convex_hull, {}, AtSize::some);
}

PropertyDef value_linearity_property() {
  return case_property("ValueLinearity",
                       "f(Q, K, a V1 + b V2) = a f(Q, K, V1) + b f(Q, K, V2) within tolerance",
                       100, always_applies, draw_linearity, judge_linearity,
                       [](const Fixture& f) {
                         const ArgsCheck a(f.args, f.problem, {"a", "b", "v2"});
                         a.required({"a", "b"});
                         a.finite_number("a");
                         a.finite_number("b");
                         a.string("v2");
                         // A case the property would have discarded is
                         // refused, or replay could fail a correct kernel.
                         const std::string defect =
                             linearity_defect(f.problem, a.find("a")->get<double>(),
                                              a.find("b")->get<double>());
                         if (!defect.empty())
                           a.error("a", "not a case of ValueLinearity: " + defect);
                       },
                       AtSize::some);
}

ATTNCHECK_REGISTER_PROPERTY(40, constant_values_property);
ATTNCHECK_REGISTER_PROPERTY(50, convex_hull_property);
ATTNCHECK_REGISTER_PROPERTY(80, value_linearity_property);

}  // namespace attncheck
