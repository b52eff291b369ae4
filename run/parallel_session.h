#pragma once
// `check --jobs N` (docs/cli.md): the items of a session's work list run in
// N forked processes of this program, each taking the next item when it is
// done with one; the parent reports the outcomes in work-list order, so
// the output, the reports and the fixtures are those of --jobs 1.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "attncheck/outcome.h"

namespace attncheck {

/// The memory one process of `check --jobs` is planned to take when
/// --memory-limit-mb gives no figure of its own (the default, half of the
/// machine, is a ceiling against a runaway worker, not what one uses): the
/// largest real-size problems of the thorough profile and their oracle take
/// well under 1 GiB; 2 GiB leaves an implementation's own buffers room.
inline constexpr int64_t kPlannedMemoryPerJobMb = 2048;

/// The processes `check` runs by default: the CPUs this process may use
/// (sched_getaffinity), at most one per `per_job_mb` MiB of the memory the
/// machine has available (/proc/meminfo MemAvailable), at least 1.
int default_jobs(int64_t per_job_mb);

/// What one item's run found, and the hangs its implementation met in it.
struct ItemRun {
  PropertyOutcome outcome;
  int hangs = 0;
};

/// How the parallel run calls back. run_item runs in a child process (item
/// `index`, with `hangs_before` hangs its implementation met in the items
/// before it in work-list order; an item whose count turns out wrong, the
/// earlier ones having hung since it started, is run again); the rest run
/// in the parent. outcome_of_death
/// says what an item is when the process running it died (`how`: "crashed
/// with signal 11 ..."); hangs_key groups items whose hangs add up (one
/// implementation); done receives the outcomes in index order.
struct ParallelCallbacks {
  std::function<ItemRun(size_t index, int hangs_before)> run_item;
  std::function<PropertyOutcome(size_t index, const std::string& how)> outcome_of_death;
  std::function<size_t(size_t index)> hangs_key;
  /// The threads item `index` keeps busy (its implementation's
  /// ImplInfo::threads); items run while theirs add up to at most `jobs`.
  /// Unset: 1 each.
  std::function<int(size_t index)> threads;
  /// `hangs`: those its implementation met in it.
  std::function<void(size_t index, PropertyOutcome&&, int hangs)> done;
  /// True once the run is interrupted: no item starts after that; the
  /// children are sent SIGTERM, so the items they run end as interrupted.
  std::function<bool()> cancelled;
  /// The outcome of an item not started because of the interruption.
  std::function<PropertyOutcome(size_t index)> not_started;
};

/// Runs items 0..count-1 in `jobs` (>= 2) processes forked from this one.
/// The parent runs nothing of an item itself, so an implementation's
/// threads (OpenMP, a thread pool) never exist in it before a fork. An
/// exception from `done` (a report that cannot be written) goes through
/// once every child is killed and reaped.
void run_in_parallel(size_t count, int jobs, const ParallelCallbacks& cb);

}  // namespace attncheck
