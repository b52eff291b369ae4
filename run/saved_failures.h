#pragma once
// The failure database (docs/cli.md, "Saved failures"), as Hypothesis's
// example database: before an item's search, the fixture an earlier run
// saved for it (fixture_path in the run's save folder) is judged again.
// One that still fails fails the item even when the search does not meet
// it (a bug the seed missed, or one a known finding's xfail would hide);
// one that now passes is moved to the folder's fixed/ (or removed).
// `check` (every way in through a session: the CLI, Python, pytest) and
// the GoogleTest glue call these around run_property.

#include <optional>

#include "attncheck/fixture.h"
#include "attncheck/implementation.h"
#include "attncheck/outcome.h"
#include "attncheck/properties.h"

namespace attncheck {

/// An item's saved fixture as it was when the run started (a session reads
/// them all first, so an item that --jobs runs twice replays what was
/// saved before the run, not what its first run saved).
struct SavedFixture {
  std::string path;
  std::optional<Fixture> fixture;  ///< nullopt: it does not read (`error`)
  std::string error;
};

/// The fixture saved for (prop, impl, dtype) in config's save folder;
/// nullopt when the run saves none, does not replay them
/// (RunConfig::replay_saved) or none is saved. Reads it; never throws for
/// what the file holds.
std::optional<SavedFixture> find_saved_failure(const PropertyInfo& prop, const std::string& impl,
                                               DType dtype, const RunConfig& config);

/// Saves an item's failure `f` at `path` (fixture_path in the run's save
/// folder) and returns where it went. A run replaces only a fixture it
/// read (find_saved_failure recorded the file as it was) and that no other
/// run has written since; a fixture another run sharing the folder wrote
/// during this one (pytest -n, ctest -j, two CI jobs) is kept, and this
/// run's case goes beside it as IMPL-DTYPE-PROPERTY-2.json (-3, ...), so
/// a report never names a fixture holding another run's case. The check and the
/// write are one step under a lock on the folder held for that step only.
/// Throws InputError as save_fixture.
std::string save_failure_fixture(const std::string& dir, const std::string& path,
                                 const Fixture& f);

/// What an item's saved failure gave, and its replay's outcome.
struct SavedReplay {
  SavedFailure saved;
  PropertyOutcome replayed;  ///< for still_fails: the failure, as replay reports it
};

/// Replays `saved` on impl, judged as the fixture recorded and by config's
/// known findings; moves it to the save folder's fixed/ (removes it when
/// RunConfig::prune_fixed) when it now passes. Never throws for what the
/// file holds.
SavedReplay replay_saved_failure(const SavedFixture& saved, const Implementation& impl,
                                 const RunConfig& config);

/// The search's outcome `out` with the saved failure: one still failing
/// turns a passed, xfail or unsupported outcome into its failure; the
/// outcome records what the replay gave (PropertyOutcome::saved).
void settle_saved_failure(const SavedReplay& replay, PropertyOutcome& out);

/// "replayed N saved failures: S still fail, P now pass (moved to
/// DIR/fixed/)", or "" when no outcome replayed one.
std::string saved_failures_summary(const std::vector<PropertyOutcome>& outcomes);

}  // namespace attncheck
