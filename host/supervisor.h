#pragma once
// The harness's side of a worker process: spawning it (this program or a
// foreign language's worker command, in a process group of its own),
// waiting for its replies within a call's time limits, telling a crash, a
// hang, a fork and an interruption apart, and reaping it.

#include <sys/types.h>

#include <ctime>
#include <string>
#include <variant>
#include <vector>

#include "host/isolation.h"

namespace attncheck::host_detail {

/// One worker process and its channel; stopped (its whole process group
/// killed) when destroyed.
class WorkerProcess {
 public:
  WorkerProcess() = default;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess() { stop(); }

  bool running() const { return pid_ > 0; }

  /// Spawns this program in worker mode (or `command`'s program, which
  /// calls worker_main) with the worker arguments of wire.h, in a process
  /// group of its own (a Ctrl-C at the terminal reaches the harness, which
  /// reports what finished; stop() kills the whole group, copies
  /// included). Throws std::logic_error when this program cannot host
  /// workers, std::runtime_error when the process cannot be started.
  void start(const std::string& mode, const std::string& name, const std::string& path,
             const WorkerCommand* command = nullptr);

  /// Kills the worker's process group (the worker and any process it
  /// forked) and reaps the worker.
  void stop();

  /// The worker closed its end: reaps it, kills what is left of its group,
  /// and says how it ended ("crashed with signal ...", "exited with ...").
  std::string reap();

  /// CPU time the worker has used, in ms (0 when it cannot be read).
  double cpu_ms() const;

  int fd() const { return fd_; }
  pid_t pid() const { return pid_; }

 private:
  void forget();

  pid_t pid_ = -1;
  int fd_ = -1;
  clockid_t cpu_clock_ = clockid_t(-1);
};

/// How a call to a worker ended when it did not return a reply.
struct Death {
  enum class Kind { died, hung, cancelled } kind;
  std::string message;
};

/// The limits of one call.
struct CallLimits {
  double cpu_ms;   ///< CPU time, or 0 for none
  double wall_ms;  ///< wall time, or 0 for the blocked rule of the CPU limit
};

/// Sends one request (none when `request` is null: a message the worker
/// sends of itself) and waits for the reply (its sender's pid checked and
/// removed) within the limits, counted from the worker's "received"; a
/// death instead of a reply. `what` names the call in messages.
std::variant<std::string, Death> exchange(WorkerProcess& worker, const std::string* request,
                                          CallLimits limits, const char* what);

/// The declarations of the file at `path` (a plugin when `mode` is
/// "plugin", else a file of a registered loader's mode, in a worker started
/// by `command`), read by a describe worker that loads it; the harness
/// never runs the file's code. A file the worker refuses is its
/// InputError; a worker that exits, crashes or hangs while loading is an
/// InputError naming the path.
std::vector<ImplInfo> describe_in_worker(const std::string& mode, const std::string& path,
                                         const WorkerCommand* command, IsolationOptions options);

}  // namespace attncheck::host_detail
