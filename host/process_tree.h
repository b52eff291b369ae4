#pragma once
// Every process a worker started, found without process groups (which a
// plugin leaves with setsid or posix_spawn's SETPGROUP) and killed. A
// worker's kernel process runs below a relay of attncheck's
// (host/containment.h): what the kernel starts lives in a PID namespace of
// its own, whose init re-parents orphans to itself, or, where the kernel
// refuses one, below the relay, a child subreaper. Either way the process
// tree below the relay and the init holds all of it. The harness is a
// subreaper too, and each worker carries a token in its environment, for
// the one case left: a relay killed by its own kernel (outside a
// namespace), whose orphans come to the harness.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::host_detail {

/// The environment variable that carries a worker's token.
inline constexpr const char* kWorkerTokenVar = "ATTNCHECK_WORKER_TOKEN";

/// Makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER),
/// once; false when the kernel refuses (then only process groups and the
/// worker's own children are found).
bool become_subreaper();

/// A new token, unique in this process and across harnesses
/// ("HARNESSPID.N").
std::string new_worker_token();

/// Records that `pid` is part of the worker whose relay is `owner` (the
/// relay itself, its kernel process, its namespace's init), or with `owner`
/// 0 that it no longer is: worker_descendants never reads its environment
/// to tell whether it is an orphan, and a signal it sends to the harness is
/// blamed on `owner` (blame_signal).
void note_worker(pid_t pid, pid_t owner);

/// The live processes below `roots` (their children, theirs, ...), the
/// roots and `skip` excluded; with a `token`, also the children of this
/// process that carry it in their environment (one read each, never
/// retried: a process caught in an exec, without a readable environment, is
/// found by the next search), with theirs. Zombies are not alive and not
/// listed.
std::vector<pid_t> worker_descendants(const std::vector<pid_t>& roots,
                                      const std::vector<pid_t>& skip, const std::string& token);

/// Kills (SIGKILL) every process worker_descendants finds, again until none
/// is left (a process that forks while being killed is found the next
/// round), and reaps those that became this process's children. Returns
/// the processes killed; the roots and `skip` are neither killed nor
/// reaped.
std::vector<pid_t> kill_worker_descendants(const std::vector<pid_t>& roots,
                                           const std::vector<pid_t>& skip,
                                           const std::string& token);

/// The resident anonymous and shared memory (RssAnon + RssShmem of
/// /proc/PID/status) of `pids`, in bytes: what a worker's memory limit
/// counts, whatever kind of mapping holds it.
uint64_t resident_bytes(const std::vector<pid_t>& pids);

/// Whether `sig`, received by this process from `sender`, came from a
/// worker's tree (a process noted by note_worker or one below it): then it
/// is recorded against that worker (take_blamed_signal) and true. The
/// harness's signal handling (core/cancel.h) asks it of every termination
/// signal, so a worker cannot end the run.
bool blame_signal(int sig, int sender);

/// The first signal blamed on the worker whose relay is `owner` since the
/// last take, or 0; forgets it.
int take_blamed_signal(pid_t owner);

/// The executable `pid` runs ("" when it cannot be read).
std::string exe_of(pid_t pid);

/// Waits (at most 2 s) until each of `pids`, killed, has exited, and reaps
/// those that are now this process's children (killed below a worker, they
/// are re-parented here when the worker is reaped).
void reap_adopted(const std::vector<pid_t>& pids);

/// "1 process running after forward (pid 12" or "3 processes running while
/// loading (pid 12, 13, 14": how the failure texts name what a worker left
/// (`when` it was found), at most five pids (then ", ..."); the caller
/// closes the parenthesis after its reason.
std::string processes_running(const std::vector<pid_t>& pids, std::string_view when);

}  // namespace attncheck::host_detail
