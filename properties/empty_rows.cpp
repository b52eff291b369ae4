// EmptyRowsAreRejected: a query with no allowed key gets the declared
// policy: an error, or exact zeros with lse = -inf; never NaN or a value.

#include <cmath>

#include <fmt/format.h>

#include "properties/case_context.h"

namespace attncheck {
namespace {

void judge_empty_rows(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r = ctx.call(p);
  std::string first_empty;
  for (int64_t b = 0; b < p.batch && first_empty.empty(); ++b)
    for (int64_t h = 0; h < p.heads && first_empty.empty(); ++h)
      for (int64_t i = 0; i < p.tq && first_empty.empty(); ++i)
        if (p.allowed_count(b, h, i) == 0) first_empty = fmt::format("(b={}, h={}, i={})", b, h, i);

  if (ctx.info().empty_rows == EmptyRowPolicy::error) {
    if (r.status != Status::error) {
      bool nan = false;
      for (double x : r.out) nan = nan || std::isnan(x);
      ctx.fail(fmt::format("declares the error policy but returned {} for a problem whose "
                              "query {} has no allowed key",
                              nan ? "NaN" : "values", first_empty));
    }
    ctx.passed(0);
    return;
  }
  if (r.status == Status::error) {
    ctx.fail("declares the zero policy but reported an error: " + r.error);
  }
  Comparison cmp;
  const bool weights = ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS);
  const bool lse = ctx.info().has(ATTNCHECK_FEATURE_LSE);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        const bool empty = p.allowed_count(b, h, i) == 0;
        for (int64_t d = 0; d < p.dv; ++d) {
          const double x = r.out[out_index(p, b, h, i, d)];
          if (!empty && std::isfinite(x)) continue;
          // Empty rows must be exactly zero; other rows at least finite.
          cmp.add_element({empty ? "out (empty row)" : "out (not finite)", {b, h, i, d},
                         empty ? 0.0 : (std::isnan(x) ? 0.0 : std::copysign(1e308, x)), x, 0, 0, 0});
        }
        if (!empty) continue;
        if (weights)
          for (int64_t j = 0; j < p.tk; ++j)
            cmp.add_element({"weights (empty row)", {b, h, i, j}, 0.0,
                           r.weights[weight_index(p, b, h, i, j)], 0, 0, 0});
        if (lse)
          cmp.add_element({"lse (empty row)", {b, h, i}, -INFINITY, r.lse[row_index(p, b, h, i)], 0, 0, 0});
      }
  ctx.expect(cmp, "empty rows are not exact zeros with lse = -inf");
}

}  // namespace

PropertyDef empty_rows_property() {
  PropertyDef d = case_property(
      "EmptyRowsAreRejected",
      "a query with no allowed key gets the declared policy: an error, or exact zeros and "
      "lse = -inf; never NaN, never a silent value",
      100,
      [](const ImplInfo& info, DType dtype) -> std::optional<std::string> {
        if (gen::can_make_empty_rows(gen::spec_for(info, dtype))) return std::nullopt;
        return "no declared feature can make a row empty (key padding, mask, bottom-right "
               "causal, window)";
      },
      [](CaseContext& ctx) { return Case{*gen::problem_with_empty_row(ctx.spec())}; },
      judge_empty_rows);
  // Its problems have an empty row: the one property whose cases break
  // rows_have_keys.
  d.not_a_case = [](const Problem& p) -> std::optional<std::string> {
    if (p.has_empty_rows()) return std::nullopt;
    return "no row is empty (every query has an allowed key)";
  };
  return d;
}

ATTNCHECK_REGISTER_PROPERTY(100, empty_rows_property);

}  // namespace attncheck
