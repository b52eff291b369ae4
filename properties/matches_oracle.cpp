// MatchesOracle and ConstantValuesReproduced: the implementation's values
// against the oracle's, element by element, within the SPEC 4 tolerance.

#include "properties/harness.h"

namespace attncheck {
namespace {

std::vector<int64_t> out_shape(const Problem& p) { return {p.batch, p.heads, p.tq, p.dv}; }

void matches_oracle(CaseContext& ctx) {
  const Problem p = *gen::problem(ctx.spec());
  const ForwardResult r = ctx.call_ok(p);
  const auto [o, t] = ctx.reference(p);
  Comparison c;
  c.add("out", out_shape(p), r.out, o.out, t.out);
  if (ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS)) {
    c.add("weights", {p.batch, p.heads, p.tq, p.tk}, r.weights, o.weights, t.weights);
  }
  if (ctx.info().has(ATTNCHECK_FEATURE_LSE)) {
    c.add("lse", {p.batch, p.heads, p.tq}, r.lse, o.lse, t.lse);
  }
  ctx.expect(p, c, "values differ from the oracle's");
}

void constant_values(CaseContext& ctx) {
  Problem p = *gen::problem(ctx.spec());
  // Every key of a (b, K/V head) slice gets the value vector of its first key.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 1; j < p.tk; ++j)
        for (int64_t d = 0; d < p.dv; ++d) p.v.at(b, g, j, d) = p.v.at(b, g, 0, d);
  const ForwardResult r = ctx.call_ok(p);
  const auto [o, t] = ctx.reference(p);
  std::vector<double> expected(o.out.size());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d)
          expected[out_index(p, b, h, i, d)] = p.v.at(b, p.kv_head(h), 0, d);
  Comparison c;
  c.add("out", out_shape(p), r.out, expected, t.out);
  ctx.expect(p, c, "equal values are not reproduced");
}

}  // namespace

PropertyDef matches_oracle_property() {
  PropertyDef d{"MatchesOracle",
                "o, and a / lse where returned, are within the SPEC 4 tolerance of the oracle's",
                100, [](const ImplInfo&, DType) { return std::optional<std::string>(); }, {}};
  d.run = [d](const Implementation& impl, DType dtype, const RunConfig& config) {
    return run_cases(d, impl, dtype, config, matches_oracle);
  };
  return d;
}

PropertyDef constant_values_property() {
  PropertyDef d{"ConstantValuesReproduced",
                "if every allowed v_j equals v then o_i = v within tolerance", 100,
                [](const ImplInfo&, DType) { return std::optional<std::string>(); }, {}};
  d.run = [d](const Implementation& impl, DType dtype, const RunConfig& config) {
    return run_cases(d, impl, dtype, config, constant_values);
  };
  return d;
}

}  // namespace attncheck
