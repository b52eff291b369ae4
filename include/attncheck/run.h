#pragma once
// The engine's entry points (run/): one property against one
// implementation in one dtype, a fixture's case judged again, and the run
// configuration a fixture recorded.

#include <optional>
#include <string>

#include "attncheck/implementation.h"
#include "attncheck/outcome.h"
#include "attncheck/properties.h"

namespace attncheck {

struct Fixture;

/// Runs `prop` (a property of the catalog) on `impl` in `dtype`, or reports
/// it skipped with the reason. Never throws for a misbehaving
/// implementation: its exceptions are failures. Throws InputError "unknown
/// property 'NAME'" for a name property_catalog() does not hold.
PropertyOutcome run_property(const PropertyInfo& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config);

/// The outcome run_property gives without calling the implementation: a
/// skip with its reason (an undeclared combination, dtype or feature), or
/// a verdict on the object itself (a layer that is none); nullopt when the
/// property would call it.
std::optional<PropertyOutcome> outcome_without_calls(const PropertyInfo& prop,
                                                     const Implementation& impl, DType dtype,
                                                     const RunConfig& config);

/// Judges a fixture's case again with the property it names, on `impl`.
/// Throws InputError for an unknown property, a property without a single
/// case, args the property refuses (validate_args), a problem that is no
/// case of the property (not_a_case) or one `impl` does not declare, and
/// a recorded dispatch path (meta.path) `impl` does not declare; a call
/// that names no path is judged by the recorded one. Throws InputError too
/// for a NaN or an infinity a row can see (the oracle's input rule,
/// check_oracle_inputs), naming the field.
PropertyOutcome replay_fixture(const Fixture& fixture, const Implementation& impl,
                               const RunConfig& config);

/// As above, the fixture's problem and args moved into the case instead of
/// copied (a large fixture is then in memory once); `fixture` is left
/// with its meta only.
PropertyOutcome replay_fixture(Fixture&& fixture, const Implementation& impl,
                               const RunConfig& config);

/// What a replay may override of what the fixture recorded; nullopt (or 0)
/// = the fixture's, else the default.
struct ReplayOverrides {
  std::optional<bool> strict;
  std::optional<std::string> profile;
  int cases = 0;
  std::optional<int64_t> timeout_ms;
  std::optional<double> baseline_factor;
};

/// The run configuration a fixture's meta recorded (seed, strict, profile,
/// cases, timeout_ms, baseline_factor), with `overrides` applied: the one
/// place that reads it, for `attncheck replay` and the Python module (the
/// failing call's dispatch path is replay_fixture's, from the fixture).
/// Throws InputError "--profile: ..." for an unknown profile,
/// "meta.baseline_factor: ..." for one below 1. `timeout_ms` is set only
/// when given or recorded (SPEC 5.3).
RunConfig replay_config(const Fixture& fixture, const ReplayOverrides& overrides = {});

}  // namespace attncheck
