#pragma once
// A worker's containment, built by the worker before any code of the
// implementation is loaded (docs/isolation.md). The process the harness
// spawned becomes a relay of attncheck's: it forks the kernel process,
// which loads and runs the implementation, and waits for it, so the
// harness still reads the kernel's crash signal or exit status as the
// relay's own. What the kernel starts lives in a PID namespace of its own
// whose first process is a small init of attncheck's, a child of the
// harness with PR_SET_PDEATHSIG: killing the init, or the harness dying,
// kills every process in it. The kernel process itself is in that
// namespace too, so it cannot name the harness's processes (no signal,
// ptrace or renice of them). Where the kernel refuses a new PID namespace,
// the relay is a child subreaper instead, so orphans below the kernel still
// come back to it, and the harness is told (kUncontained) to say so once.

#include <sys/types.h>

#include <string>

namespace attncheck::host_detail {

/// The environment variable that, set to anything but "" or "0", makes
/// workers skip the PID namespace (the fallback's tests).
inline constexpr const char* kNoPidNamespaceVar = "ATTNCHECK_NO_PID_NAMESPACE";

/// Worker side, before anything of the implementation is loaded: builds the
/// containment, sends the harness its first message (kContained with the
/// init's and the kernel's process ids, or kUncontained with the reason),
/// and returns in the kernel process only; the relay and the init never
/// return. `harness` is the harness's process id.
void contain_worker(pid_t harness);

/// Drops every capability (bounding, ambient, permitted, effective,
/// inheritable), sets no_new_privs and bounds RLIMIT_NPROC: a compute
/// kernel needs none of them, and without them root cannot ptrace, signal
/// or renice the harness. Idempotent.
void drop_privileges();

/// The kernel process's check of its channel after a read or send on it
/// failed: kChannelLostExit when kWorkerFd was closed, kChannelReplacedExit
/// when it is now another file than the socket it was, else 0 (the harness
/// closed its end).
int channel_failure_exit();

}  // namespace attncheck::host_detail
