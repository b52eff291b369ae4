#pragma once
// Cancellation of a run: SIGINT / SIGTERM set a flag that every long wait
// of the harness checks (an isolated call polls it while the implementation
// runs), so a run stops within moments, even during a hanging call, and
// reports what finished.

#include <stdexcept>

namespace attncheck {

/// Asks the run to stop. Async-signal-safe: a signal handler may call it.
void request_cancel() noexcept;

/// True once request_cancel() was called (until reset_cancel()).
bool cancel_requested() noexcept;

/// Clears the flag (a new run in the same process, tests).
void reset_cancel() noexcept;

/// Thrown by a call that was abandoned because the run was cancelled. The
/// session reports the property it interrupted as not-run, never as failed.
class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("interrupted") {}
};

}  // namespace attncheck
