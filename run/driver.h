#pragma once
// The RapidCheck driver's entry points for the rest of the engine: the one
// room that runs RapidCheck (run/driver.cpp) draws cases for the real-size
// phase too, since a property's draw uses RapidCheck's generators.

#include <cstdint>
#include <optional>

#include "attncheck/properties.h"
#include "properties/case_context.h"

namespace attncheck {

/// One case drawn by prop's draw with RapidCheck's generators at `seed`,
/// never shrunk (the real-size phase: the draw reads ctx.spec()'s shape).
/// nullopt when the draw discarded it (ctx.discard, counted in ctx, or a
/// generator that gave up). Any other exception of the draw propagates.
std::optional<Case> draw_at_seed(const PropertyDef& prop, CaseContext& ctx, uint64_t seed);

}  // namespace attncheck
