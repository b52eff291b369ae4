#pragma once
// The property catalog as GoogleTest tests, for a user's own test
// executable (the CMake package's attncheck_add_tests does the wiring):
// one test per (dtype, property) of an implementation.

#include <memory>
#include <string>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/properties.h"

namespace attncheck {

/// How the registered tests run.
struct GTestSuiteOptions {
  /// Seed below 2^53; 0 = ATTNCHECK_SEED when set, else kDefaultSeed
  /// (resolve_seed of attncheck/session.h, as `attncheck check`).
  uint64_t seed = 0;
  Profile profile = Profile::ci;
  int cases = 0;               ///< 0 = each property's default for the profile
  /// Where failing cases are saved as fixtures (relative to the test's
  /// working directory); empty = not saved.
  std::string save_failures_dir = "attncheck-failures";
  /// The expected-failures list (docs/cli.md: by property, or a known
  /// finding by cause), relative to the test's working directory; a missing
  /// file is an empty list, as for `attncheck check`. A test whose failure
  /// the list expects is skipped (GTEST_SKIP) naming the finding; one the
  /// list expects that passes where its finding's fixture passes too (xpass)
  /// fails, naming the entry to remove.
  std::string expected_failures = "fixtures/expected-failures.json";
  /// Where the programs of one build claim their implementations' names
  /// (attncheck_add_tests sets a folder of the build): a name another
  /// program of the build claimed is refused, as their ctest names would
  /// be the same. Empty: not checked.
  std::string names_dir;
};

/// Registers with testing::RegisterTest, for every dtype `impl` supports
/// and every property of the catalog, a test `attncheck_<impl>.<Property>_<dtype>`
/// (characters GoogleTest filters treat specially, '.' and '-', become '_').
/// A test passes when the property passed, is skipped (GTEST_SKIP, with the
/// reason) when the property is skipped, unsupported or xfail, and fails with the
/// whole failure report (counterexample, reproduce line, fixture) otherwise.
/// Call after testing::InitGoogleTest and before RUN_ALL_TESTS.
///
/// At run time ATTNCHECK_SEED, ATTNCHECK_PROFILE and ATTNCHECK_TEST_CASES
/// override options.seed, profile and cases; ATTNCHECK_REPLAY=FILE|DIR
/// judges the saved fixtures of each test again in place of its search. A
/// failure's report prints the test's own reproduce line (`RC_PARAMS=...
/// ATTNCHECK_SEED=S /abs/TESTS --gtest_filter=SUITE.NAME`) and the
/// fixture's absolute path with its rerun line. A bad value (a seed not
/// below 2^53, an unknown profile, an expected-failures list that does not
/// read, a name another program claimed) is one line on stderr and one
/// failing test `attncheck_<impl>.Configuration`, never an abort.
void add_gtest_suite(std::shared_ptr<const Implementation> impl,
                     const GTestSuiteOptions& options = {});

/// add_gtest_suite for each registered implementation named in `names`, or
/// when `names` is empty for those `attncheck check` checks by default
/// (default_impls of attncheck/session.h: kinds reference, adapter and
/// layer). Throws std::invalid_argument for a name nobody registered.
void add_gtest_suites(const std::vector<std::string>& names, const GTestSuiteOptions& options = {});

}  // namespace attncheck
