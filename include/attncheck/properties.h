#pragma once
// The property catalog (SPEC section 2): what a property is, how a run is
// configured, and the registered properties in SPEC order. Running them is
// the engine's (attncheck/run.h).

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

struct Case;
class CaseContext;

/// Draws a case with RapidCheck generators (only inside a property run).
using DrawFn = std::function<Case(CaseContext&)>;
/// Judges a case: returns after ctx.passed(), or fails / discards (throws).
using JudgeFn = std::function<void(CaseContext&, const Case&)>;
/// Why a property does not apply to an implementation in a dtype, or
/// nullopt when it does.
using SkipFn = std::function<std::optional<std::string>(const ImplInfo&, DType)>;
/// Checks a fixture's args before replay judges them (PropertyDef::validate_args).
using ValidateArgsFn = std::function<void(const Fixture&)>;
/// Why a problem is no case of a property (PropertyDef::not_a_case), or
/// nullopt when it is one.
using NotACaseFn = std::function<std::optional<std::string>(const Problem&)>;

/// A property's verdict on an implementation object before any case: a
/// property for layers skips an implementation that is not one.
struct ObjectVerdict {
  PropertyStatus status;
  std::string message;
};

/// A property of the catalog. It is one of two forms: checked case by case
/// (draw and judge: the engine, run/, draws and shrinks cases with
/// RapidCheck, runs the real-size phase and replays fixtures), or run whole
/// (a statistical test with no single case: `run_whole`). Each family file
/// of properties/ registers its properties (ATTNCHECK_REGISTER_PROPERTY in
/// properties/case_context.h); the engine knows none by name.
struct PropertyDef {
  std::string name;
  std::string statement;  ///< one line for `attncheck list`
  int default_cases = 0;  ///< for the ci profile
  /// Why the property does not apply to this implementation and dtype, or
  /// nullopt when it does (empty: it always applies).
  SkipFn skip_reason;
  /// Draws and judges a case (case properties; empty for run_whole).
  DrawFn draw;
  JudgeFn judge;
  /// A statistical property's whole run, filling the outcome (empty for
  /// case properties).
  std::function<void(const Implementation&, DType, const RunConfig&, PropertyOutcome&)> run_whole;
  /// Checks the fixture's args that replay reads against its problem (a
  /// row inside it, permutations of 0..tq-1, ...), so that a hostile
  /// fixture cannot make the judge index outside the problem. Throws
  /// InputError "field 'args.KEY': ..."; empty when the property reads no
  /// args.
  ValidateArgsFn validate_args;
  /// Why a problem is no case of this property (SPEC 3: rows have an
  /// allowed key, except EmptyRowsAreRejected's; a causal property's
  /// problem is causal...), or nullopt. Replay refuses a fixture whose
  /// problem is none (its label is a claim), and a shrink pass never keeps
  /// one. case_property sets rows_have_keys; a family adds its own rule.
  NotACaseFn not_a_case;
  /// The keys of the case's args that name a slice of the problem (a row, a
  /// batch entry, a head): a case carrying one keeps every slice when
  /// shrunk (run/shrink_passes.cpp).
  std::vector<std::string> slice_args;
  /// A verdict on the implementation object before any case, or nullopt
  /// to go on (empty: always go on).
  std::function<std::optional<ObjectVerdict>(const Implementation&)> object_verdict;
  /// Whether it runs at real sizes (for `list --verbose` and the docs).
  AtSize at_size = AtSize::no;
  /// It judges the real-size shapes beyond the declared precision (SPEC 3:
  /// AsAccurateAsBaseline's subject), which every other property discards:
  /// the real-size summary counts them among the judged.
  bool judges_beyond_precision = false;
  /// Where it stands in the catalog: SPEC section 2's order, numbered in
  /// tens so that a new property fits between two (the registry sorts by
  /// it and refuses two properties at one place).
  int position = 0;

  /// A case property (draw and judge), not a statistical one.
  bool has_cases() const { return static_cast<bool>(judge); }
};

/// The catalog: every registered property, in the order of SPEC section 2.
const std::vector<PropertyDef>& property_catalog();

/// The property with this name, or nullptr.
const PropertyDef* find_property(std::string_view name);

/// The number of cases a property runs under a config.
int case_budget(const PropertyDef& prop, const RunConfig& config);

/// Seed used when neither --seed nor ATTNCHECK_SEED is given.
inline constexpr uint64_t kDefaultSeed = 20260101;

}  // namespace attncheck
