#pragma once
// Running an implementation under test in a child process (the reliability
// issue): a crash, an abort or a hang in the implementation becomes a
// failed call the properties report with its counterexample, and the
// harness goes on.

#include <cstdint>
#include <memory>
#include <stdexcept>

#include "attncheck/implementation.h"

namespace attncheck {

/// Thrown by an isolated implementation's forward or backward when the call
/// did not return: the child process died (a signal such as SIGSEGV or
/// SIGABRT, or an exit) or ran past the time limit and was killed. The
/// message says which. The next call starts a fresh child.
class ImplementationDied : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Default per-call limit of CPU time (--timeout-ms): generous, as the
/// properties' problems take a correct kernel well under a millisecond,
/// and measured in CPU time, so a loaded machine or a sanitizer build (2-5x
/// slower) does not turn a slow call into a false hang.
inline constexpr int64_t kDefaultCallTimeoutMs = 10000;

/// A call that blocks without using CPU (a deadlock, a sleep) is stopped
/// when its wall time exceeds this multiple of the CPU limit while it has
/// used less than kBlockedCpuShare of that wall time in CPU time.
inline constexpr int64_t kWallTimeoutFactor = 10;

/// A runnable process on a machine with load L on N cores gets about N / L
/// of a core, so a slow call on a loaded machine (a sanitizer build under
/// ctest -j2, L of 8 on 2 cores: a share of 0.25) is never taken for a
/// blocked one; only a load of 40 on 2 cores would reach 0.05.
inline constexpr double kBlockedCpuShare = 0.05;

struct IsolationOptions {
  int64_t timeout_ms = kDefaultCallTimeoutMs;  ///< CPU time per call
};

/// `impl` behind a child process: the same info(); forward and backward
/// send the problem to a child (forked from this process when first
/// needed, so it has every plugin this process loaded) and read the result
/// back. The child runs in its own process group (a Ctrl-C reaches only the
/// harness, which then reports what finished) and dies with its parent.
/// Exceptions the implementation throws in the child are thrown again here
/// with their message (a PluginContractError stays one). A call whose child
/// dies, or uses more than options.timeout_ms of CPU time (or
/// kWallTimeoutFactor times that of wall time), throws ImplementationDied.
/// The parent must not run implementations with threads of their own
/// before it forks (check does not: every implementation it checks is
/// isolated).
std::shared_ptr<const Implementation> isolate(std::shared_ptr<const Implementation> impl,
                                              IsolationOptions options = {});

}  // namespace attncheck
