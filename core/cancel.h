#pragma once
// Cancellation of a run: SIGINT / SIGTERM set a flag that every long wait
// of the harness checks (an isolated call polls it while the implementation
// runs), so a run stops within moments, even during a hanging call, and
// reports what finished.

#include <stdexcept>

namespace attncheck {

/// Asks the run to stop. Async-signal-safe: a signal handler may call it.
void request_cancel() noexcept;

/// A signal handler's report of termination signal `sig` sent by process
/// `sender` (siginfo's si_pid, 0 for the kernel or a terminal).
/// Async-signal-safe. The next cancel_requested() asks the sender check
/// (set_signal_sender_check) whether `sender` is one of the harness's own
/// workers: then the signal is that worker's misdeed, not a request to
/// stop; else it cancels as request_cancel() does.
void note_signal(int sig, int sender) noexcept;

/// Whether a signal from `sender` came from a worker (and was recorded
/// against it); installed by the isolation layer (host/process_tree.h).
using SignalSenderCheck = bool (*)(int sig, int sender);
void set_signal_sender_check(SignalSenderCheck check) noexcept;

/// True once request_cancel() was called, or a noted signal came from
/// anything but a worker (until reset_cancel()).
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
