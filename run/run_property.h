#pragma once
// The engine's entry points of attncheck/run.h over the properties' own
// PropertyDef, for run/ and the harness's tests: what the public ones,
// given a PropertyInfo, call with the catalog's PropertyDef of that name.
// A PropertyDef made outside the catalog (a test's) runs as it is.

#include <optional>

#include "attncheck/implementation.h"
#include "attncheck/outcome.h"
#include "attncheck/properties.h"
#include "properties/property_def.h"

namespace attncheck {

/// run_property of attncheck/run.h, for this PropertyDef.
PropertyOutcome run_property(const PropertyDef& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config);

/// outcome_without_calls of attncheck/run.h, for this PropertyDef.
std::optional<PropertyOutcome> outcome_without_calls(const PropertyDef& prop,
                                                     const Implementation& impl, DType dtype,
                                                     const RunConfig& config);

}  // namespace attncheck
