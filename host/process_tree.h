#pragma once
// Every process a worker started, found without process groups (which a
// plugin leaves with setsid or posix_spawn's SETPGROUP) and killed: the
// harness is a child subreaper, so a process orphaned below a worker (a
// double fork, a daemon) is re-parented to the harness instead of init; each
// worker is started with a token in its environment, which its descendants
// inherit, so an adopted orphan is told apart from the harness's other
// children (a Python harness's own subprocesses) and attributed to its
// worker.

#include <sys/types.h>

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

/// Records that `pid` is (or, with `live` false, no longer is) a worker of
/// this process: worker_descendants never reads a worker's environment to
/// tell whether it is another worker's orphan.
void note_worker(pid_t pid, bool live);

/// The live processes below `worker` (its children, theirs, ...) and the
/// children of this process that carry `token` in their environment, with
/// theirs; `worker` itself excluded. Zombies are not alive and not listed.
std::vector<pid_t> worker_descendants(pid_t worker, const std::string& token);

/// Kills (SIGKILL) every process worker_descendants finds, again until none
/// is left (a process that forks while being killed is found the next
/// round), and reaps those that became this process's children. Returns
/// the processes killed. `worker` itself is neither killed nor reaped.
std::vector<pid_t> kill_worker_descendants(pid_t worker, const std::string& token);

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
