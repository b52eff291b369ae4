#pragma once
// The shrinker: every step that makes a counterexample smaller after
// RapidCheck's own shrinking, each a named pass, in two ordered lists (as
// Hypothesis's shrinker keeps `shrink_passes`).
// - Slice passes, for a small counterexample RapidCheck shrank: each
//   offers slices of the current counterexample as candidates; the first
//   that still fails replaces it, and the passes start again from the
//   first until none makes progress.
// - Size passes, for a counterexample the real-size phase found
//   (run/real_sizes.h): there is no RapidCheck shrinking at these sizes
//   (its greedy steps stop at local minima of the size: a 64-key tile bug
//   fails at 65 and 129 but not at 100, and each candidate costs a
//   real-size call), so each pass searches one part of the shape (the
//   structure the failure does not need, lengths, head dims, heads, batch,
//   sequences, values) and the passes run once each, in order.
// Each candidate is judged by judge_once (run/judge_once.h).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/properties.h"
#include "core/transforms.h"
#include "properties/case_context.h"

namespace attncheck {

/// A slice pass: its name, and the slices of a counterexample it tries as
/// candidates, in order (each made only when its turn comes).
struct ShrinkPass {
  std::string name;
  std::function<std::vector<SliceChoice>(const Problem&)> slices;
};

/// The slice passes, in the order they run: batch entries, then K/V head
/// groups (or query heads, without grouped K/V) the failure does not need
/// are dropped. RapidCheck shrinks each draw in place, so a slice whose
/// values are not the simplest stays after it: a counterexample keeps
/// batch, heads and kv_heads above 1 only when the failure needs them.
const std::vector<ShrinkPass>& shrink_passes();

/// Runs the slice passes on ctx's failed case, judging each candidate with
/// judge_once (which records the failure it finds as the new
/// counterexample). Only for dense problems, and cases whose args name no
/// slice (PropertyDef::slice_args); a candidate must still be a case of
/// `prop` (PropertyDef::not_a_case), or its fixture would not replay. The
/// counts of the run (cases, discards, budget) are left as they were: a
/// candidate is not RapidCheck's.
void run_shrink_passes(const PropertyDef& prop, CaseContext& ctx);

/// What a size pass works with: whether a shape still fails (its case
/// drawn at the failure's seed and judged; a failure is left in ctx as the
/// counterexample), the generator spec (limits and features), and ctx (the
/// latest counterexample, whose layout some passes read).
struct SizeSearch {
  std::function<bool(const gen::SizeShape&)> fails;
  const gen::GenSpec& spec;
  const CaseContext& ctx;
};

/// A size pass: its name, and the search that moves `cur` to a smaller
/// shape that still fails (or leaves it).
struct SizeShrinkPass {
  std::string name;
  std::function<void(gen::SizeShape& cur, const SizeSearch& search)> shrink;
};

/// The size passes, in the order they run: the structure the failure does
/// not need (softcap, bias, mask, window, causal, key padding, each kept
/// only if the case passes without it), the window narrowed, the key and
/// query lengths (the reported length n fails, and n - 1 and every grid
/// length below n pass), the window again (a narrow window lets lengths
/// shrink further, and shorter lengths the window), head dims, heads,
/// batch, the sequences of a packed or paged draw, then the values (the
/// plain regime, then a few simpler kinds).
const std::vector<SizeShrinkPass>& size_shrink_passes();

/// Runs the size passes on `found` (a failing shape), once each in order,
/// and returns the shrunk shape.
gen::SizeShape shrink_at_size(const gen::SizeShape& found, const SizeSearch& search);

/// The smallest n in [1, start] with fails(n); `start` fails. Lengths of
/// `grid` below it are tried upwards until one fails, then the gap to the
/// last passing one is bisected.
int64_t smallest_failing(int64_t start, const std::vector<int64_t>& grid,
                         const std::function<bool(int64_t)>& fails);

}  // namespace attncheck
