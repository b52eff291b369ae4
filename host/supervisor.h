#pragma once
// The harness's side of a worker process: spawning it (this program or a
// foreign language's worker command, in a session of its own), waiting for
// its replies within a call's time limits, telling a crash, a hang, a fork
// and an interruption apart, capturing its output, and reaping it with
// every process it started.

#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <variant>
#include <vector>

#include "host/isolation.h"
#include "host/wire.h"

namespace attncheck::host_detail {

/// One worker process, its channel and its output; stopped (it and every
/// process it started killed) when destroyed.
class WorkerProcess {
 public:
  WorkerProcess() = default;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess() { stop(); }

  bool running() const { return pid_ > 0; }

  /// Spawns this program in worker mode (or `command`'s program, which
  /// calls worker_main) with the worker arguments of wire.h, in a session
  /// of its own (no controlling terminal: nothing a plugin writes or reads
  /// can stop it with SIGTTOU or SIGTTIN, and a Ctrl-C at the terminal
  /// reaches only the harness, which reports what finished), stdin from
  /// /dev/null, stdout and stderr into a pipe the harness reads (the
  /// worker's output never mixes with the harness's), no core files, at
  /// most `memory_limit_mb` MiB of memory (0: no limit), and a token
  /// (host/process_tree.h) its descendants inherit. The process started is
  /// the worker's relay; the implementation runs in the kernel process it
  /// forks (host/containment.h), which the first exchange places. Throws
  /// std::logic_error when this program cannot host workers,
  /// std::runtime_error when the process cannot be started.
  void start(const std::string& mode, const std::string& name, const std::string& path,
             const WorkerCommand* command = nullptr, int64_t memory_limit_mb = 0);

  /// Kills every process the worker started (process_tree.h), its process
  /// group and the worker, and reaps it. Returns how many processes other
  /// than the worker were still running.
  int stop();

  /// The worker closed its end: reaps it (waiting at most kReapWaitMs for
  /// it to exit, then killing it), kills what it left, and says how it
  /// ended ("crashed with signal ...", "exited with ...").
  std::string reap();

  /// The signal that ended the worker at the last reap(), or 0 (it exited,
  /// or did not end by itself).
  int last_signal() const { return last_signal_; }

  /// CPU time the worker has used, in ms (0 when it cannot be read).
  double cpu_ms() const;

  /// Reads what the worker wrote to stdout and stderr since the last read,
  /// without blocking: the first kOutputKept bytes since take_output()
  /// are kept, the rest counted.
  void drain_output();
  /// What the worker wrote since the last take_output(), as a clause for a
  /// message ("; it wrote 12 bytes to stdout/stderr: \"...\"", escaped and
  /// cut by printable()), or "" when it wrote nothing; then forgets it.
  std::string take_output();

  /// The processes the worker started that are still running.
  std::vector<pid_t> descendants() const;

  /// Takes the relay's first message (kContained or kUncontained, `r` read
  /// past its kind): where the kernel process and the init are. Throws
  /// WireError when it is not one.
  void place(uint8_t kind, Reader& r);
  /// True once place() took the relay's message.
  bool placed() const { return placed_; }
  /// The process id the kernel process puts in its replies (its own id
  /// inside its namespace).
  pid_t sender_pid() const { return sender_pid_; }
  /// Resident anonymous and shared memory of the kernel process and every
  /// process it started, in MiB.
  double memory_mb() const;
  /// The memory limit the worker runs under, in MiB (0: none).
  int64_t memory_limit_mb() const { return memory_limit_mb_; }
  /// The program the kernel process runs now, when it is no longer the one
  /// it started with (the implementation called execve); else "".
  std::string replaced_program() const;

  int fd() const { return fd_; }
  int output_fd() const { return out_fd_; }
  pid_t pid() const { return pid_; }

 private:
  void forget();
  // The ending stop() and reap() share: kills what the worker started and,
  // unless it `exited` (waited for already), the worker, waiting for it
  // into status and usage; reaps what was adopted. Returns how many
  // processes other than the worker were killed.
  size_t end_tree(bool exited, int* status, rusage* usage);
  // The relay and, in a namespace, its init: every process of the worker
  // is below them.
  std::vector<pid_t> roots() const;

  pid_t pid_ = -1;      // the relay, the harness's child
  pid_t kernel_ = -1;   // the kernel process, below the relay
  pid_t init_ = -1;     // its PID namespace's init, or -1 without one
  pid_t sender_pid_ = -1;
  bool placed_ = false;
  std::string kernel_exe_;
  int fd_ = -1;
  int out_fd_ = -1;
  std::string token_;
  std::string output_;
  uint64_t output_bytes_ = 0;
  int64_t memory_limit_mb_ = 0;
  int last_signal_ = 0;
  clockid_t cpu_clock_ = clockid_t(-1);
};

/// How long reap() waits for a worker that closed its channel to exit.
inline constexpr int kReapWaitMs = 2000;
/// Bytes of a call's output a message quotes from (the rest is counted).
inline constexpr size_t kOutputKept = 4096;
/// The slowest a worker may receive and decode a request, in bytes per ms
/// (8 MB/s, far below any machine's memory copy): with
/// kWallTimeoutFactor x the CPU limit on top, the bound on the time before
/// the worker says it received a request.
inline constexpr double kSlowestDecodeBytesPerMs = 8192;

/// The memory limit a worker gets for `option` (IsolationOptions::
/// memory_limit_mb): half of the physical memory for the default, else the
/// option.
int64_t worker_memory_limit_mb(int64_t option);

/// How a call to a worker ended when it did not return a reply.
struct Death {
  enum class Kind { died, hung, cancelled } kind;
  std::string message;
  int signal = 0;  ///< died of a signal: its number (the worker's wait status), else 0
};

/// The limits of one call.
struct CallLimits {
  double cpu_ms;   ///< CPU time, or 0 for none
  double wall_ms;  ///< wall time, or 0 for the blocked rule of the CPU limit
};

/// Sends one request (none when `request` is null: a message the worker
/// sends of itself) and waits for the reply (its sender's pid checked and
/// removed), a death instead of a reply. Every wait is bounded by deadlines
/// the worker cannot move, and a cancellation ends it: the request must be
/// sent and acknowledged ("received", once) within kWallTimeoutFactor x
/// the CPU limit plus its size at kSlowestDecodeBytesPerMs; the call's
/// limits count from that acknowledgement (without a request: from the
/// start). A reply longer than `max_reply` bytes is malformed, never
/// buffered. The worker's output is drained meanwhile. `what` names the
/// call in messages.
std::variant<std::string, Death> exchange(WorkerProcess& worker, const Writer* request,
                                          CallLimits limits, const char* what,
                                          uint64_t max_reply);

/// The declarations of the file at `path` (a plugin when `mode` is
/// "plugin", else a file of a registered loader's mode, in a worker started
/// by `command`), read by a describe worker that loads it; the harness
/// never runs the file's code. A file the worker refuses is its
/// InputError; a worker that exits, crashes or hangs while loading is an
/// InputError naming the path.
std::vector<ImplInfo> describe_in_worker(const std::string& mode, const std::string& path,
                                         const WorkerCommand* command, IsolationOptions options);

/// The largest declarations (describe) or start-up reply read from a
/// worker: a plugin's descriptors with their texts are kilobytes.
inline constexpr uint64_t kMaxDescribeReplyBytes = uint64_t{64} << 20;

}  // namespace attncheck::host_detail
