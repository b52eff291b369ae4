#pragma once
// The property catalog (SPEC section 2) and the runner that checks one
// property against one implementation in one dtype.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"

namespace attncheck {

struct Fixture;

/// Verdict of one (implementation, dtype, property) run (SPEC 5.2).
enum class PropertyStatus { passed, failed, xfail, xpass, skipped, unsupported, not_run };

/// "passed", "failed", ...
std::string_view status_name(PropertyStatus s);

/// How a run is budgeted and where its failures go.
struct RunConfig {
  uint64_t seed = 0;           ///< below 2^53
  std::string profile = "ci";
  int cases = 0;               ///< 0 = the property's default for the profile
  bool strict = false;
  std::string save_failures_dir;  ///< empty = do not save fixtures
};

/// Shape of a counterexample, for the report.
struct CounterexampleShape {
  int64_t batch, heads, kv_heads, tq, tk, dk, dv;
  DType dtype;
};

/// What one run found.
struct PropertyOutcome {
  std::string property;
  std::string impl;
  Kind kind = Kind::reference;
  DType dtype = DType::f64;
  PropertyStatus status = PropertyStatus::not_run;
  int cases = 0;        ///< cases judged
  int discarded = 0;    ///< cases not judged (unsupported, ill-conditioned)
  double max_budget_used = 0;  ///< largest budget used by a passing case
  std::string message;  ///< one line, or the whole failure report
  std::optional<std::string> fixture;
  std::optional<CounterexampleShape> counterexample;
  /// Names of the known bug classes (attncheck/diagnosis.h) that explain the
  /// shrunk counterexample's output; empty when none does or nothing failed.
  std::vector<std::string> diagnosis;
};

/// A property of the catalog.
struct PropertyDef {
  std::string name;
  std::string statement;  ///< one line for `attncheck list`
  int default_cases;      ///< for the ci profile
  /// Why the property does not apply to this implementation and dtype, or
  /// nullopt when it does.
  std::function<std::optional<std::string>(const ImplInfo&, DType)> skip_reason;
  /// Runs the property (only called when skip_reason gives nullopt).
  std::function<PropertyOutcome(const Implementation&, DType, const RunConfig&)> run;
  /// Judges a saved fixture's case again (empty for statistical properties,
  /// which have no single case).
  std::function<PropertyOutcome(const Implementation&, const Fixture&, const RunConfig&)> replay;
};

/// The catalog, in the order of SPEC section 2.
const std::vector<PropertyDef>& property_catalog();

/// The property with this name, or nullptr.
const PropertyDef* find_property(std::string_view name);

/// Runs `prop` on `impl` in `dtype`, or reports it skipped with the reason.
/// Never throws for a misbehaving implementation: its exceptions are failures.
PropertyOutcome run_property(const PropertyDef& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config);

/// Judges a fixture's case again with the property and implementation it
/// names (or `impl` when given). Throws InputError for an unknown property
/// or implementation, or a property without replay.
PropertyOutcome replay_fixture(const Fixture& fixture, const Implementation& impl,
                               const RunConfig& config);

/// Seed used when neither --seed nor ATTNCHECK_SEED is given.
inline constexpr uint64_t kDefaultSeed = 20260101;

}  // namespace attncheck
