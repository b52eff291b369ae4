// The real-size phase of a property run (SPEC 3 "Real sizes"): after the
// small problems pass, the profile's fixed real-size shapes and random
// real-size draws, each fitted to the implementation's limits and the
// profile's cost cap, one case each. It only searches: a failure is shrunk
// by the size passes of run/shrink_passes.h, the case's seed fixed, so its
// values stay where they were (generators.h: SizeShape).

#include <algorithm>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "run/real_sizes.h"

#include "properties/case_context.h"
#include "properties/seeds.h"
#include "run/driver.h"
#include "run/judge_once.h"
#include "run/shrink_passes.h"

namespace attncheck {
namespace {

// Cases per profile: fixed shapes taken (all, or a share) and random draws.
struct Plan {
  size_t fixed_share;  // 0 = every fixed shape
  int random;
};

Plan plan_for(AtSize at_size, Profile profile) {
  const bool thorough = profile == Profile::thorough;
  if (at_size == AtSize::all) return {0, thorough ? 16 : 3};
  return {thorough ? size_t{6} : size_t{1}, thorough ? 4 : 1};
}

// Two shapes the phase draws alike: the same but for what they are for
// (variant and label, set as a shape is added).
bool same_draw(gen::SizeShape a, const gen::SizeShape& b) {
  a.variant = b.variant;
  a.label = b.label;
  return a == b;
}

}  // namespace

std::vector<gen::SizeShape> planned_real_shapes(const std::string& property, AtSize at_size,
                                                Profile profile, const gen::GenSpec& spec,
                                                int64_t weight, uint64_t seed) {
  const int64_t cap = gen::size_cost_cap(profile);
  // The shapes: the fixed list, the structural covering set and the
  // covering rule's (or this property's share of the fixed list, starting
  // at a place of its own so that the catalog covers the list), then the
  // random draws; fitted, duplicates dropped.
  const Plan plan = plan_for(at_size, profile);
  const std::vector<gen::SizeShape> fixed = gen::fixed_real_shapes(profile);
  std::vector<gen::SizeShape> shapes;
  const auto add = [&](const gen::SizeShape& s) {
    gen::SizeShape f = gen::fit_shape(s, spec, cap, weight);
    for (const auto& x : shapes)
      if (same_draw(x, f)) return;
    f.variant = static_cast<int64_t>(shapes.size());  // the parts it takes, in turn
    // The value regimes in turn (SPEC 3: each in a real-size MatchesOracle
    // case of every run), numbered from far-below scores so that with
    // CI's 13 fixed shapes near-flat scores come at tk 1025 and far-below
    // ones at the decode over 4097 keys. Properties with a share of the
    // shapes draw plain values: their judges change values (sums of two
    // value sets, translated keys) within limits the regimes sit near.
    if (at_size == AtSize::all) {
      f.regime = static_cast<gen::SizeRegime>((shapes.size() + 2) % gen::kSizeRegimes);
    }
    shapes.push_back(f);
  };
  std::vector<gen::SizeShape> covering;
  if (plan.fixed_share == 0) {
    for (const auto& s : fixed) add(s);
    for (const auto& s : gen::structural_real_shapes()) add(s);
    // The covering rule (issue 51): every on/off combination of every pair
    // of declared structural features, whatever fitting left of the lists
    // (not counting the random draws, so that it holds at every seed).
    covering = gen::covering_shapes(shapes, spec, cap, weight,
                                    static_cast<int64_t>(shapes.size()) + plan.random);
  } else {
    const size_t start = fnv1a(property) % fixed.size();
    const size_t step = fixed.size() / plan.fixed_share;
    for (size_t k = 0; k < plan.fixed_share; ++k) add(fixed[(start + k * step) % fixed.size()]);
  }
  for (int k = 0; k < plan.random; ++k) {
    add(gen::random_real_shape(profile, mix(seed ^ (0x5157ull + static_cast<uint64_t>(k)))));
  }
  // Last, so that the random draws keep their numbers, and with them the
  // serving parts they take, whatever the rule adds.
  for (const auto& s : covering) add(s);
  return shapes;
}

SizePhase run_real_sizes(const PropertyDef& prop, CaseContext& ctx, uint64_t seed) {
  const std::string& property = prop.name;
  SizePhase phase;
  const Profile profile = ctx.config().profile;
  ctx.set_size(std::nullopt);
  const gen::GenSpec spec = ctx.spec();
  const std::vector<gen::SizeShape> shapes = planned_real_shapes(
      property, prop.at_size, profile, spec, gen::reference_weight(ctx.info()), seed);

  // One case at a shape: drawn with RapidCheck (the property's own draw,
  // at that shape), judged, never shrunk by it: given a failure RapidCheck
  // would describe the counterexample (draw the problem again and print
  // every element: gigabytes at these sizes, minutes per case; the search
  // judges dozens). A discarded case is drawn again at the shape with the
  // next seed, kDrawsPerShape draws in all.
  constexpr int kDrawsPerShape = 3;
  const auto run_at = [&](const gen::SizeShape& s, uint64_t case_seed) {
    ctx.set_size(s);
    for (int draw_index = 0; draw_index < kDrawsPerShape; ++draw_index) {
      ctx.last_discard_reason.clear();
      ctx.case_beyond_precision = false;
      const uint64_t draw_seed =
          draw_index == 0 ? case_seed : mix(case_seed + static_cast<uint64_t>(draw_index));
      const std::optional<Case> c = draw_at_seed(prop, ctx, draw_seed);
      if (!c) continue;  // the draw discarded it
      const Verdict v = judge_once(prop, ctx, *c);
      if (!v.discarded()) return v;
    }
    return Verdict::discard(ctx.last_discard_reason);
  };

  for (size_t k = 0; k < shapes.size(); ++k) {
    const uint64_t case_seed = mix(seed ^ (0xA11CEull + k));
    const Verdict v = run_at(shapes[k], case_seed);
    // The shape's verdict, by its last draw: a discarded shape by the
    // reason of its last discard (kDrawsPerShape draws all discarded).
    RealSizeCounts& n = phase.counts;
    ++n.shapes;
    if (ctx.case_beyond_precision) ++n.beyond_precision;
    if (v.discarded()) {
      if (ctx.last_discard_reason == "unsupported by the implementation") {
        ++n.unsupported;
      } else if (!ctx.case_beyond_precision) {
        ++n.discarded;
      }
    } else {
      ++n.judged;
    }
    if (!v.failed()) continue;
    const gen::SizeShape found = shapes[k];
    const SizeSearch search{
        [&](const gen::SizeShape& s) { return run_at(s, case_seed).failed(); }, spec, ctx};
    const gen::SizeShape cur = shrink_at_size(found, search);
    run_at(cur, case_seed);  // leaves the final case as ctx's counterexample
    phase.failed = true;
    phase.found = fmt::format(
        "  at real size: found at {} ({}); shrunk by search to {}{}\n", found.describe(),
        found.label, cur.describe(),
        cur.tk > 1 ? fmt::format(" (tk {} fails; tk {} and every grid length below pass)", cur.tk,
                                 cur.tk - 1)
                   : "");
    break;
  }
  ctx.set_size(std::nullopt);
  return phase;
}

}  // namespace attncheck
