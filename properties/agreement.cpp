// CrossImplementationAgreement: on problems larger than the other
// properties draw (tq, tk up to 24 in CI, 64 under thorough; dk, dv up to
// 16 / 32), the implementation and a partner reference implementation
// agree within the sum of their tolerances. Bugs that need long rows (a
// fixed-size tile, an index that wraps) live here.

#include <fmt/format.h>

#include "attncheck/registry.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

// The algorithm family of a built-in name: "loop", "batched", "online"...
std::string family(const std::string& name) { return name.substr(0, name.find('_')); }

// Those of `info`'s combinations with output `dtype` that `other` declares
// too: the problems both may be handed.
std::vector<DTypeCombo> shared_combos(const ImplInfo& info, const ImplInfo& other, DType dtype) {
  std::vector<DTypeCombo> v;
  for (const DTypeCombo& c : info.combos_with_output(dtype))
    if (other.supports(c)) v.push_back(c);
  return v;
}

// The partner: another reference implementation sharing a format
// combination in this output dtype, of another algorithm family when there
// is one (two runs of the same kernel agreeing proves little), declaring
// the most features.
std::shared_ptr<const Implementation> partner_for(const ImplInfo& info, DType dtype) {
  std::shared_ptr<const Implementation> best;
  const auto rank = [&](const ImplInfo& x) {
    return std::pair(family(x.name) != family(info.name), __builtin_popcount(x.features));
  };
  for (const auto& impl : registered_impls()) {
    const ImplInfo& other = impl->info();
    if (other.kind != Kind::reference || other.name == info.name ||
        shared_combos(info, other, dtype).empty()) {
      continue;
    }
    if (!best || rank(other) > rank(best->info())) best = impl;
  }
  return best;
}

gen::GenSpec large_spec(const CaseContext& ctx, const ImplInfo& partner) {
  gen::GenSpec spec = ctx.spec();
  // Only the formats both take (under --dtype, the one asked for, if both do).
  std::vector<DTypeCombo> both;
  for (const DTypeCombo& c : shared_combos(ctx.info(), partner, ctx.dtype()))
    if (!ctx.config().combo || *ctx.config().combo == c) both.push_back(c);
  spec.combos = both;
  // Only what both take; output-side features (weights, lse, backward,
  // nondeterminism) do not shape the problem.
  const Features shaping = ~(ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_LSE |
                             ATTNCHECK_FEATURE_BACKWARD | ATTNCHECK_FEATURE_NONDETERMINISTIC);
  spec.features &= partner.features | ~shaping;
  // Scores the partner stores in a coarse format bound the problems too:
  // beyond its first-order range its tolerance says nothing.
  const PrecisionTraits& pt = partner.precision;
  if (!spec.score_storage && pt.s_cast_format() != pt.score_format())
    spec.score_storage = pt.s_cast_format();
  // So does a partner's Q rounded to Q8_0 (q_cast, SPEC 4.1): about bf16's
  // unit roundoff of the largest |q| (gen::spec_for says why).
  for (const DTypeCombo& c : both) {
    const std::optional<DType> q_cast = pt.q_cast_format(c.kv);
    if (q_cast && is_block_format(*q_cast) &&
        (!spec.score_storage || unit_roundoff(*spec.score_storage) < unit_roundoff(DType::bf16)))
      spec.score_storage = DType::bf16;
  }
  const bool thorough = ctx.config().profile == Profile::thorough;
  spec.max_t = thorough ? 64 : 24;
  spec.max_d = thorough ? 32 : 16;
  spec.max_bh = 2;
  return spec;
}

void judge_agreement(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const auto partner = partner_for(ctx.info(), ctx.dtype());
  if (!partner) ctx.discard("no partner implementation");
  const ForwardResult r = ctx.call_ok(p);
  if (const std::string part = undeclared_serving_part(partner->info(), p); !part.empty()) {
    ctx.fail(fmt::format("attncheck drew a problem with {}, which the partner {} does not "
                         "declare: a defect of attncheck (please report it)",
                         part, partner->info().name));
  }
  const ForwardResult rp = partner->forward(p);
  if (rp.status != Status::ok) ctx.discard("the partner could not compute the problem");
  const auto [o, t] = ctx.reference(p);
  const Tolerances tp = tolerances(p, o, partner->info().precision);
  // A row beyond the partner's first-order analysis has no tolerance of its
  // own (0, not computed): judging the pair there would charge the
  // partner's error to the implementation.
  if (tp.ill_conditioned_rows > 0) ctx.discard("ill-conditioned for the partner's precision");
  Comparison cmp;
  compare_array(cmp, ArrayKind::out, p, rp.out, r.out, pairwise_tolerance(t.out, tp.out),
                CompareMode::tolerance, "vs " + partner->info().name);
  ctx.expect(cmp, fmt::format("disagrees with {} beyond both tolerances", partner->info().name));
}

}  // namespace

PropertyDef agreement_property() {
  return case_property(
      "CrossImplementationAgreement",
      "on larger problems, the implementation and another reference implementation agree within "
      "the sum of their tolerances",
      50,
      [](const ImplInfo& info, DType dtype) -> std::optional<std::string> {
        if (partner_for(info, dtype)) return std::nullopt;
        return fmt::format("no other reference implementation in {}", dtype_name(dtype));
      },
      [](CaseContext& ctx) {
        const auto partner = partner_for(ctx.info(), ctx.dtype());
        const gen::GenSpec spec = large_spec(ctx, partner->info());
        if (spec.combos.empty()) ctx.discard("the partner does not take the combination asked for");
        return Case{*gen::problem(spec)};
      },
      judge_agreement);
}

ATTNCHECK_REGISTER_PROPERTY(200, agreement_property);

}  // namespace attncheck
