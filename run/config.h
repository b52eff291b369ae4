#pragma once
// The run's configuration in one place: what the caller asked for (the
// command line's flags, GTestSuiteOptions, the Python call's arguments) and
// the variables of the environment, made one RunConfig, as proptest's
// `contextualize_config` makes its Config. A flag comes before its
// variable. docs/cli.md lists every variable, with who reads it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "attncheck/implementation.h"
#include "attncheck/properties.h"

namespace attncheck {

/// The variables a run reads, by name; a name absent is unset.
using Environment = std::map<std::string, std::string>;

/// The variable of the seed when no flag gives one: an integer below 2^53.
inline constexpr const char* kSeedVariable = "ATTNCHECK_SEED";
/// "0" skips the real-size phase (SPEC 3) everywhere, whatever a
/// RunConfig says; any other value, or none, leaves it on.
inline constexpr const char* kRealSizesVariable = "ATTNCHECK_REAL_SIZES";
/// RapidCheck's own configuration: when set, the driver reads it (its
/// reproduce map replays a shrunk small case).
inline constexpr const char* kRapidCheckVariable = "RC_PARAMS";

/// A GoogleTest program's (attncheck_add_tests, include/attncheck/gtest.h)
/// run-time choices, over what it was built with: the profile ("ci" or
/// "thorough"), the cases per property (an integer from 1), and a fixture
/// file or folder of them to replay instead of searching.
inline constexpr const char* kProfileVariable = "ATTNCHECK_PROFILE";
inline constexpr const char* kTestCasesVariable = "ATTNCHECK_TEST_CASES";
inline constexpr const char* kReplayVariable = "ATTNCHECK_REPLAY";

/// This process's values of the variables above (those set).
Environment process_environment();

/// What the caller asked for, before the environment is consulted. Each
/// field is the flag's value as given, or its default.
struct RunFlags {
  /// --seed; nullopt = ATTNCHECK_SEED when set and not empty, else
  /// kDefaultSeed.
  std::optional<std::string> seed;
  /// How an error names `seed` ("--seed: 'x' is not a seed ...").
  std::string seed_option = "--seed";
  /// --profile: "ci" or "thorough".
  std::string profile = "ci";
  /// How an error names `profile` ("--profile: unknown profile ..."); ""
  /// = the message alone.
  std::string profile_option = "--profile";
  int cases = 0;  ///< --cases; 0 = the profile's
  bool strict = false;
  bool real_sizes = true;  ///< false with --no-real-sizes
  /// --timeout-ms, the isolated call's limit; the default is recorded as
  /// none (RunConfig::timeout_ms = 0).
  int64_t timeout_ms = kDefaultCallTimeoutMs;
  std::string save_failures_dir;  ///< --save-failures; empty = none saved
  bool prune_fixed = false;  ///< --prune-fixed: remove saved failures that now pass
  PropertyOptions property_options;
};

/// The run's configuration: `flags`, and from `env` what no flag gave (the
/// seed). Throws InputError naming the flag or the variable whose value is
/// bad ("ATTNCHECK_SEED: 'abc' is not a seed (an integer below 2^53)").
/// The combination of formats (RunConfig::combo) is the caller's.
RunConfig configure_run(const RunFlags& flags, const Environment& env);

/// A test program's flags: `built_in` (what attncheck_add_tests wrote
/// into it) with ATTNCHECK_SEED, ATTNCHECK_PROFILE and ATTNCHECK_TEST_CASES
/// of `env` over them, each named in an error by its variable, so a
/// printed reproduce line (`ATTNCHECK_SEED=S ./TESTS --gtest_filter=...`)
/// runs what failed. Throws InputError "ATTNCHECK_TEST_CASES: 'x' is not a
/// number of cases (an integer from 1 to 100000)".
RunFlags test_program_flags(RunFlags built_in, const Environment& env);

/// The seed: `given` when set (named `given_name` in an error), else
/// ATTNCHECK_SEED of `env` when set and not empty, else kDefaultSeed.
uint64_t configured_seed(const std::optional<std::string>& given, std::string_view given_name,
                         const Environment& env);

/// False when `env` has ATTNCHECK_REAL_SIZES=0.
bool real_sizes_enabled(const Environment& env);

/// Whether this process has RC_PARAMS (the driver then reads RapidCheck's
/// configuration, which announces itself when first read).
bool rapidcheck_params_given();

}  // namespace attncheck
