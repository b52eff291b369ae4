#pragma once
// How a session isolates the implementations it checks (SPEC 5.2
// --timeout-ms): the options a library consumer sets; the workers
// themselves are the host room's (host/isolation.h).

#include <cstdint>

namespace attncheck {

/// Default per-call limit of CPU time (--timeout-ms): generous, as the
/// properties' problems take a correct kernel well under a millisecond,
/// and measured in CPU time, so a loaded machine or a sanitizer build (2-5x
/// slower) does not turn a slow call into a false hang.
inline constexpr int64_t kDefaultCallTimeoutMs = 10000;

/// IsolationOptions::memory_limit_mb's default: half of the machine's
/// physical memory, so that one runaway worker never reaches the OOM killer
/// while a real-size problem (at most a few GiB with the harness's own
/// copy) still fits.
inline constexpr int64_t kMemoryLimitHalfOfMachine = -1;

/// Workers for every implementation of a session (SessionConfig::isolation).
struct IsolationOptions {
  /// CPU time per call; loading a plugin in a worker may take
  /// kWallTimeoutFactor times this in wall time (100 s by default: a plugin
  /// that links a large framework, LibTorch, takes seconds to load).
  int64_t timeout_ms = kDefaultCallTimeoutMs;
  /// Memory a worker may allocate (--memory-limit-mb), in MiB:
  /// kMemoryLimitHalfOfMachine for half of this machine's physical memory,
  /// 0 for no limit. A worker past it cannot allocate more (RLIMIT_DATA:
  /// heap, anonymous mappings, thread stacks): the call fails, reported as
  /// out of memory, and the machine's other processes are untouched. Not
  /// applied in sanitizer builds, whose shadow memory it would count.
  int64_t memory_limit_mb = kMemoryLimitHalfOfMachine;
};

}  // namespace attncheck
