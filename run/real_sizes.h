#pragma once
// The real-size phase of a case property (SPEC 3 "Real sizes").

#include <cstdint>
#include <string>

#include "attncheck/outcome.h"
#include "attncheck/properties.h"
#include "properties/case_context.h"

namespace attncheck {

/// What the real-size phase found.
struct SizePhase {
  bool failed = false;
  /// Each shape's verdict (outcome.h), up to and including a failing one.
  RealSizeCounts counts;
  std::string found;  ///< on failure: the shape it was found at, and the search
};

/// After the small problems passed: the property's real-size shapes, each
/// one case drawn and judged (no RapidCheck shrinking). A failure is shrunk
/// by the size passes (run/shrink_passes.h) and left in ctx as the
/// counterexample.
SizePhase run_real_sizes(const PropertyDef& prop, CaseContext& ctx, uint64_t seed);

}  // namespace attncheck
