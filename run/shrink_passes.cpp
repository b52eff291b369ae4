// The shrink passes after RapidCheck's (run/shrink_passes.h).

#include "run/shrink_passes.h"

#include <rapidcheck.h>

namespace attncheck {
namespace {

bool names_a_slice(const PropertyDef& prop, const nlohmann::json& args) {
  for (const std::string& key : prop.slice_args)
    if (args.contains(key)) return true;
  return false;
}

}  // namespace

const std::vector<ShrinkPass>& shrink_passes() {
  static const std::vector<ShrinkPass> passes = {
      {"drop_batch_entries",
       [](const Problem& p) {
         std::vector<SliceChoice> choices;
         if (p.batch > 1)
           for (int64_t b = 0; b < p.batch; ++b) choices.push_back({b, std::nullopt, std::nullopt});
         return choices;
       }},
      {"drop_heads",
       [](const Problem& p) {
         // With grouped K/V a group goes with its query heads; without, one
         // query head at a time.
         std::vector<SliceChoice> choices;
         if (p.kv_heads > 1)
           for (int64_t g = 0; g < p.kv_heads; ++g) choices.push_back({std::nullopt, g, std::nullopt});
         else if (p.heads > 1)
           for (int64_t h = 0; h < p.heads; ++h) choices.push_back({std::nullopt, std::nullopt, h});
         return choices;
       }},
  };
  return passes;
}

void run_shrink_passes(const PropertyDef& prop, CaseContext& ctx, const JudgeFn& judge) {
  // A slice keeps the args and stays dense: eligibility is decided once.
  if (!ctx.failed_case || names_a_slice(prop, ctx.failed_case->args) ||
      ctx.failed_case->problem.varlen())
    return;
  const auto fails = [&](const Problem& p) {
    if (prop.not_a_case && prop.not_a_case(p)) return false;
    const Case c{p, ctx.failed_case->args};
    ctx.begin(c);
    try {
      judge(ctx, c);
    } catch (const rc::detail::CaseResult& r) {
      return r.type == rc::detail::CaseResult::Type::Failure;
    } catch (const std::exception&) {
    }
    return false;
  };
  const int cases = ctx.cases, discarded = ctx.discarded;
  const auto reasons = ctx.discard_reasons;
  const double budget = ctx.max_budget_used;
  bool progress = true;
  while (progress) {
    progress = false;
    const Problem p = ctx.failed_case->problem;
    for (const ShrinkPass& pass : shrink_passes()) {
      for (const SliceChoice& choice : pass.slices(p)) {
        if (fails(slice_problem(p, choice))) {
          progress = true;
          break;
        }
      }
      if (progress) break;
    }
  }
  ctx.cases = cases;
  ctx.discarded = discarded;
  ctx.discard_reasons = reasons;
  ctx.max_budget_used = budget;
}

}  // namespace attncheck
