#pragma once
// The shrink passes that run after RapidCheck's own shrinking, as a named
// list (as Hypothesis's shrinker keeps `shrink_passes`): each pass offers
// candidates made from the current counterexample; the first that still
// fails replaces it, and the passes start again from the first until none
// makes progress.

#include <functional>
#include <string>
#include <vector>

#include "attncheck/properties.h"
#include "core/transforms.h"
#include "properties/case_context.h"

namespace attncheck {

/// One pass: its name, and the slices of a counterexample it tries as
/// candidates, in order (each made only when its turn comes).
struct ShrinkPass {
  std::string name;
  std::function<std::vector<SliceChoice>(const Problem&)> slices;
};

/// The passes, in the order they run: batch entries, then K/V head groups
/// (or query heads, without grouped K/V) the failure does not need are
/// dropped. RapidCheck shrinks each draw in place, so a slice whose values
/// are not the simplest stays after it: a counterexample keeps batch,
/// heads and kv_heads above 1 only when the failure needs them.
const std::vector<ShrinkPass>& shrink_passes();

/// Runs the passes on ctx's failed case, judging each candidate with
/// `judge` (which records the failure it finds as the new counterexample).
/// Only for dense problems, and cases whose args name no slice
/// (PropertyDef::slice_args); a candidate must still be a case of `prop`
/// (PropertyDef::not_a_case), or its fixture would not replay. The counts
/// of the run (cases, discards, budget) are left as they were: a candidate
/// is not RapidCheck's.
void run_shrink_passes(const PropertyDef& prop, CaseContext& ctx, const JudgeFn& judge);

}  // namespace attncheck
