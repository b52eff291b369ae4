// The public entry points of attncheck/run.h over a PropertyInfo: each
// finds the catalog's PropertyDef of that name and runs it through the
// driver (run/run_property.h), so that a library user never sees the
// properties' own types.

#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"

namespace attncheck {

PropertyOutcome run_property(const PropertyInfo& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config) {
  return run_property(property_def(prop), impl, dtype, config);
}

std::optional<PropertyOutcome> outcome_without_calls(const PropertyInfo& prop,
                                                     const Implementation& impl, DType dtype,
                                                     const RunConfig& config) {
  return outcome_without_calls(property_def(prop), impl, dtype, config);
}

}  // namespace attncheck
