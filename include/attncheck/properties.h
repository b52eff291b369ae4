#pragma once
// The property catalog (SPEC section 2): what a property is, how a run is
// configured, and the registered properties in SPEC order. Running them is
// the engine's (attncheck/run.h).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/outcome.h"

namespace attncheck {

/// The budget of a run (SPEC 5.2): ci, the default, or thorough (ten times
/// the cases and larger problems).
enum class Profile { ci, thorough };

/// "ci" or "thorough".
std::string_view profile_name(Profile p);

/// Parses a profile name; throws InputError "unknown profile 'NAME'
/// (expected ci or thorough)".
Profile parse_profile(std::string_view name);

/// AsAccurateAsBaseline's F when --baseline-factor gives none (SPEC 2).
inline constexpr double kDefaultBaselineFactor = 8;

/// The knobs of single properties, each set by a flag of its own: the
/// engine passes them through untouched, the property that owns one reads
/// it, and the failure report and the fixture record each that differs
/// from its default (docs/architecture.md says why a struct).
struct PropertyOptions {
  /// AsAccurateAsBaseline's F (SPEC 2, --baseline-factor): the error an
  /// implementation may have, in multiples of the baseline's.
  double baseline_factor = kDefaultBaselineFactor;

  bool operator==(const PropertyOptions&) const = default;
};

/// How a run is budgeted and where its failures go (run/config.h makes
/// one from flags and the environment).
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
  /// The options of single properties (--baseline-factor, ...).
  PropertyOptions property_options;
  /// The known findings of this implementation and property (the session
  /// takes them from the expected-failures list): a failing case whose
  /// every offending call one of them explains is set aside while the
  /// search looks for one they do not explain; only when it finds none is
  /// the property xfail, with the explained case shrunk (docs/cli.md).
  /// Empty: every failure counts, as without a list.
  std::vector<KnownFinding> known_findings;
  /// How the failure report's reproduce and rerun lines run the case
  /// again; empty = `attncheck check ...` and `attncheck replay FIXTURE`.
  /// The GoogleTest glue sets its program and the test's filter
  /// ("/abs/TESTS --gtest_filter=SUITE.NAME"): the lines then set
  /// RC_PARAMS, ATTNCHECK_SEED (and ATTNCHECK_PROFILE, ATTNCHECK_TEST_CASES
  /// where not the default) or ATTNCHECK_REPLAY before it.
  std::string test_program;
  /// The failure database (docs/cli.md): before its search an item
  /// replays its fixture saved in save_failures_dir by an earlier run; one
  /// that still fails fails the item even where the search passes, one that
  /// now passes is moved to save_failures_dir/fixed/ (removed when
  /// prune_fixed). Off: the saved fixtures are only written.
  bool replay_saved = true;
  bool prune_fixed = false;
};

/// False when the environment variable ATTNCHECK_REAL_SIZES is "0"
/// (read by run/config.cpp): the real-size phase is then skipped
/// everywhere, whatever RunConfig says
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

/// A property of the catalog as a user sees it: what `attncheck list`
/// prints and what a session (attncheck/session.h) or run_property
/// (attncheck/run.h) is given. How it draws and judges its cases is the
/// properties room's own (properties/property_def.h); each family file of
/// properties/ registers its properties, and the engine knows none by name.
struct PropertyInfo {
  std::string name;
  std::string statement;  ///< one line for `attncheck list`
  int default_cases = 0;  ///< for the ci profile
  /// Whether it runs at real sizes (for `list --verbose` and the docs).
  AtSize at_size = AtSize::no;
  /// Where it stands in the catalog: SPEC section 2's order, numbered in
  /// tens so that a new property fits between two (the registry sorts by
  /// it and refuses two properties at one place).
  int position = 0;
};

/// The catalog: every registered property, in the order of SPEC section 2.
const std::vector<PropertyInfo>& property_catalog();

/// The property with this name, or nullptr.
const PropertyInfo* find_property(std::string_view name);

/// The number of cases a property runs under a config.
int case_budget(const PropertyInfo& prop, const RunConfig& config);

/// Seed used when neither --seed nor ATTNCHECK_SEED is given.
inline constexpr uint64_t kDefaultSeed = 20260101;

}  // namespace attncheck
