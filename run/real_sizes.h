#pragma once
// The real-size phase of a case property (SPEC 3 "Real sizes").

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/outcome.h"
#include "attncheck/properties.h"
#include "properties/case_context.h"
#include "properties/gen/real_size_shapes.h"

namespace attncheck {

/// What the real-size phase found.
struct SizePhase {
  bool failed = false;
  /// Each shape's verdict (outcome.h), up to and including a failing one.
  RealSizeCounts counts;
  std::string found;  ///< on failure: the shape it was found at, and the search
};

/// The fitted shapes the real-size phase judges for `property` (its
/// at_size) under `profile`, in order: for AtSize::all the fixed list and
/// the structural covering set, else a share of the fixed list; then the
/// random draws of `seed`; last, for AtSize::all, the covering rule's
/// shapes (gen::covering_shapes) for what the lists leave uncovered. `weight` is gen::reference_weight of the implementation.
std::vector<gen::SizeShape> planned_real_shapes(const std::string& property, AtSize at_size,
                                                Profile profile, const gen::GenSpec& spec,
                                                int64_t weight, uint64_t seed);

/// After the small problems passed: the property's real-size shapes, each
/// one case drawn and judged (no RapidCheck shrinking). A failure is shrunk
/// by the size passes (run/shrink_passes.h) and left in ctx as the
/// counterexample.
SizePhase run_real_sizes(const PropertyDef& prop, CaseContext& ctx, uint64_t seed);

}  // namespace attncheck
