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
#include "attncheck/outcome.h"

namespace attncheck {

struct Fixture;

/// The budget of a run (SPEC 5.2): ci, the default, or thorough (ten times
/// the cases and larger problems).
enum class Profile { ci, thorough };

/// "ci" or "thorough".
std::string_view profile_name(Profile p);

/// Parses a profile name; throws InputError "unknown profile 'NAME'
/// (expected ci or thorough)".
Profile parse_profile(std::string_view name);

/// How a run is budgeted and where its failures go.
struct RunConfig {
  uint64_t seed = 0;           ///< below 2^53
  Profile profile = Profile::ci;
  int cases = 0;               ///< 0 = the property's default for the profile
  bool strict = false;
  std::string save_failures_dir;  ///< empty = do not save fixtures
  /// The isolated call's time limit the run had (--timeout-ms), carried to
  /// the reproduce line and the fixture; 0 = the default (or no isolation).
  int64_t timeout_ms = 0;
  /// Run the real-size phase (SPEC 3) after the small problems pass; off
  /// with --no-real-sizes (carried to the reproduce line).
  bool real_sizes = true;
  /// A mixed combination of formats (--dtype q=F,kv=F,out=F, SPEC 5.2) the
  /// run is restricted to; nullopt = q = kv = out = the run's dtype.
  std::optional<DTypeCombo> combo;
};

/// False when the environment variable ATTNCHECK_REAL_SIZES is "0": the
/// real-size phase is then skipped everywhere, whatever RunConfig says
/// (ci/test sets it for the sanitizer build, where sizes cost 3-5 times
/// more and the small problems already run every code path under the
/// sanitizers).
bool real_sizes_enabled();

/// How much of the real-size phase (SPEC 3) a property runs.
enum class AtSize {
  no,    ///< small problems only (statistical, layer and gradient properties)
  some,  ///< a share of the profile's fixed shapes, and random draws
  all,   ///< every fixed shape of the profile, and random draws
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
  /// Checks the fixture's args that replay reads against its problem (a
  /// row inside it, permutations of 0..tq-1, ...), so that a hostile
  /// fixture cannot make the judge index outside the problem. Throws
  /// InputError "field 'args.KEY': ..."; empty when the property reads no
  /// args.
  std::function<void(const Fixture&)> validate_args;
  /// Whether it runs at real sizes (for `list --verbose` and the README).
  AtSize at_size = AtSize::no;
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
/// or implementation, a property without replay, or args the property
/// refuses (validate_args).
PropertyOutcome replay_fixture(const Fixture& fixture, const Implementation& impl,
                               const RunConfig& config);

/// Seed used when neither --seed nor ATTNCHECK_SEED is given.
inline constexpr uint64_t kDefaultSeed = 20260101;

}  // namespace attncheck
