#pragma once
// A check session (SPEC 5.2): the seed, the implementations x dtypes x
// properties work list and its shard, expected failures and interruption,
// each outcome handed to reporters (attncheck/reporters.h) as it comes.
// `attncheck check` and the GoogleTest integration are thin layers over it,
// as google/benchmark's command line is over its runner.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/fixture.h"
#include "attncheck/implementation.h"
#include "attncheck/outcome.h"
#include "attncheck/properties.h"

namespace attncheck {

class Reporter;

/// Parses a seed: an integer below 2^53 (a JSON number reads it back
/// exactly). Throws InputError "WHERE: 'TEXT' is not a seed (an integer
/// below 2^53)".
uint64_t parse_seed(const std::string& text, std::string_view where);

/// The seed of a session: `given` when set (named `given_name` in an
/// error), else ATTNCHECK_SEED when set and not empty, else kDefaultSeed,
/// the fixed seed of every profile. Each is checked by parse_seed.
uint64_t resolve_seed(const std::optional<std::string>& given,
                      std::string_view given_name = "--seed");

/// One of `count` shards of the work list: shard `index` (from 1) runs the
/// items i (from 0) with i % count == index - 1.
struct Shard {
  int index = 1;
  int count = 1;
};

/// Parses "K/N" with 1 <= K <= N; the empty text is the whole list (1/1).
/// Throws InputError "--shard: 'TEXT' is not K/N with 1 <= K <= N".
Shard parse_shard(const std::string& text);

/// The implementations a session checks when none is named: the registered
/// ones of kind reference, adapter and layer (never broken: those exist to
/// fail), sorted by name.
std::vector<std::shared_ptr<const Implementation>> default_impls();

/// The dtypes a session checks `info` in, in kAllDTypes order: `only` when
/// given (one the implementation lacks is then reported skipped), else
/// every dtype it supports.
std::vector<DType> session_dtypes(const ImplInfo& info, std::optional<DType> only);

/// What a session runs and how.
struct SessionConfig {
  /// The implementations, in order; empty = default_impls().
  std::vector<std::shared_ptr<const Implementation>> impls;
  /// The properties, in order; empty = the whole catalog.
  std::vector<const PropertyInfo*> properties;
  /// Only this dtype; nullopt = session_dtypes' default.
  std::optional<DType> dtype;
  /// Seed (resolve_seed), profile, cases, strict, where failures are saved.
  RunConfig run;
  Shard shard;
  /// Failures turned xfail, passes turned xpass.
  ExpectedFailures expected_failures;
  /// Each implementation behind a child process (host/isolation.h);
  /// nullopt = in this process.
  std::optional<IsolationOptions> isolation;
  /// Processes the items run in (`check --jobs`, run/parallel_session.h):
  /// 1 = this one; N > 1 = N forked processes, the outcomes reported in
  /// work-list order as with 1.
  int jobs = 1;
  /// Set (from a signal handler, say) to stop: checked before each item,
  /// the items not started are reported not-run. nullptr = never.
  const std::atomic<bool>* cancel = nullptr;
};

/// One (implementation, dtype, property) of a session.
struct WorkItem {
  std::shared_ptr<const Implementation> impl;
  DType dtype;
  const PropertyInfo* property;
};

/// The items of config.shard, in the order of the whole list:
/// implementations, then their dtypes, then properties.
std::vector<WorkItem> work_list(const SessionConfig& config);

/// A failure of a pair `expected` names by property becomes xfail; a pass
/// becomes xpass, its message saying which file expected the failure.
void apply_expected_failures(const ExpectedFailures& expected, PropertyOutcome& outcome);

/// By cause: a passed run becomes xpass when a known finding `expected`
/// lists for its implementation has a fixture of this property and output
/// format that `impl` now passes (the finding is gone); the message names
/// the fixture, the finding and the file. A property that merely did not
/// meet the cause stays passed. Throws InputError for a fixture that does
/// not read.
void note_findings_gone(const ExpectedFailures& expected, const Implementation& impl,
                        PropertyOutcome& outcome);

/// What a session found.
struct SessionResult {
  uint64_t seed = 0;
  Profile profile = Profile::ci;
  Shard shard;
  std::vector<PropertyOutcome> outcomes;  ///< in work-list order
  std::map<PropertyStatus, int> counts;   ///< outcomes per status (absent = 0)
  /// The largest budget used by a passing case, per implementation name.
  std::map<std::string, double> max_budget;
  bool interrupted = false;  ///< the cancel flag was set by the end

  /// The number of outcomes of this status.
  int count(PropertyStatus s) const;
  /// True when anything failed or passed against expectation (exit 1).
  bool failed() const;
};

/// Runs the session: reporters' on_start, then every item of the work list
/// through run_property with each outcome (after expected failures) handed
/// to on_outcome, then on_finish. Does not throw for a misbehaving
/// implementation; a reporter's exceptions (a report that cannot be
/// written) go through.
SessionResult run_session(const SessionConfig& config, const std::vector<Reporter*>& reporters);

}  // namespace attncheck
