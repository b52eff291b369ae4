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
/// one case drawn and judged (no RapidCheck shrinking); a failure is
/// shrunk by searching the smallest failing length, head dims, heads and
/// batch (SPEC 3), and left in ctx as the counterexample.
SizePhase run_real_sizes(const std::string& property, AtSize at_size, CaseContext& ctx,
                         const DrawFn& draw, const JudgeFn& judge, uint64_t seed);

}  // namespace attncheck
