#pragma once
// Running an implementation under test in a worker process: a crash, an
// abort, an exit, a hang or a fork in the implementation becomes a failed
// call the properties report with its counterexample, and the harness goes
// on.
//
// Workers are spawned, never forked from the harness: each is a fresh
// execution of this program (/proc/self/exe) in worker mode that builds
// the implementation itself (a built-in from the registry, a plugin by
// loading it), so the harness may hold threads (a threaded BLAS, torch) and
// never runs foreign code. Each worker runs the implementation in a kernel
// process below a relay of attncheck's, in a PID namespace of its own where
// the kernel allows one (host/containment.h), which the harness kills whole
// when it is done with it; every reply carries the kernel process's id, and
// a reply from any other process (a plugin that forked) stops the worker
// with a failure. A program that isolates must
// call worker_main() first thing in main().

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/implementation.h"

namespace attncheck {

/// Thrown by an isolated implementation's forward or backward when the call
/// did not return: the worker died (a signal such as SIGSEGV or SIGABRT, or
/// an exit), ran past the time limit and was killed, or forked and answered
/// from a second process. The message says which. The next call starts a
/// fresh worker.
class ImplementationDied : public std::runtime_error {
 public:
  explicit ImplementationDied(const std::string& message, int signal = 0)
      : std::runtime_error(message), signal_(signal) {}
  /// The signal the implementation's process died of (SIGILL, SIGSEGV), or
  /// 0: it exited, hung, or broke the protocol.
  int signal() const { return signal_; }

 private:
  int signal_ = 0;
};

/// A call that blocks without using CPU (a deadlock, a sleep) is stopped
/// when its wall time exceeds this multiple of the CPU limit while it has
/// used less than kBlockedCpuShare of that wall time in CPU time.
inline constexpr int64_t kWallTimeoutFactor = 10;

/// A worker's start-up before a call (exec, the program's static set-up, a
/// plugin's loading) may take kWallTimeoutFactor x the call's CPU limit of
/// wall time, and never less than this: a start-up is no call, and at a
/// --timeout-ms of 10 the factor alone left 100 ms, which a sanitizer
/// build's start-up under ctest -j2 on a loaded machine passed
/// (Isolation.TheCpuLimitCountsFromTheDecodedRequest failed as a hang).
/// A start-up that hangs is still stopped, 2 s later at most.
inline constexpr double kMinStartUpWallMs = 2000;

/// A runnable process on a machine with load L on N cores gets about N / L
/// of a core, so a slow call on a loaded machine (a sanitizer build under
/// ctest -j2, L of 8 on 2 cores: a share of 0.25) is never taken for a
/// blocked one; only a load of 40 on 2 cores would reach 0.05.
inline constexpr double kBlockedCpuShare = 0.05;

/// The bound on deaths while one property shrinks (docs/isolation.md):
/// after the first death of a property run, at most kMaxHangsPerProperty
/// further calls may time out and at most kMaxCrashesPerProperty may
/// crash; past either bound the implementation is not called again in that
/// property (the call reports UNSUPPORTED, a discarded case, so shrinking
/// keeps the last real death as its counterexample). Shrinking a hang to its
/// smallest shape takes about ten accepted steps (one per dimension, each a
/// hang), so 16 leaves room for some values; a property's worst case is
/// then 17 x kWallTimeoutFactor x --timeout-ms of wall time (170 s at
/// --timeout-ms 1000). This is the first property that hangs; see
/// kMaxHangsPerPropertyAfterAHang for the later ones.
inline constexpr int kMaxHangsPerProperty = 16;
/// Once the implementation has hung in an earlier property of the run, a
/// property stops calling it at its first hang: that case, unshrunk, is the
/// property's counterexample (the first property's fixture holds the
/// smallest hanging case found), and each later verdict costs one hang.
inline constexpr int kMaxHangsPerPropertyAfterAHang = 0;
/// The bound on a whole run: after this many hangs of one implementation
/// (all properties and dtypes together) it is not called again; the
/// session reports its remaining properties not-run (those it does not
/// declare stay skipped). The first hanging property takes at most 17, so
/// 15 more properties keep a verdict each; the hangs of a run then cost at
/// most 32 x kWallTimeoutFactor x --timeout-ms of wall time (320 s at
/// --timeout-ms 1000, 53 min at the default 10000) where calls block, and
/// 32 x --timeout-ms of CPU time where they spin.
inline constexpr int kMaxHangsPerRun = 32;
/// Crashes cost a worker start each (well under a second), so shrinking a
/// crash to its smallest case (a few dozen deaths) stays inside this bound.
inline constexpr int kMaxCrashesPerProperty = 64;


/// Workers alive at once across implementations: starting another stops
/// the least recently called idle one (it starts again when next called).
/// Each holds two file descriptors of the harness, so 32 leave room in the
/// smallest common limit (256) for the harness's own.
inline constexpr size_t kMaxLiveWorkers = 32;

/// An implementation behind a worker, as the session sees it.
class IsolatedImplementation : public Implementation {
 public:
  /// A new property starts: its death budget is full again.
  virtual void begin_property() const = 0;
  /// True when the last death of the current property was a hang (the
  /// property's counterexample is a call that did not return).
  virtual bool hung() const = 0;
  /// True once the implementation has hung kMaxHangsPerRun times in this
  /// run: it is not called again.
  virtual bool out_of_hangs() const = 0;
  /// The hangs of this run so far.
  virtual int hangs_in_run() const = 0;
  /// Before a property: the hangs of the run's earlier properties, wherever
  /// they ran (`check --jobs` runs them in several processes), so the
  /// property treats a hang as it would in one process.
  virtual void set_hangs_in_run(int hangs) const = 0;
};

/// Stops every idle worker of this process (each starts again when next
/// called). `check --jobs` calls it before forking its processes, so that
/// none of them inherits another's worker.
void stop_idle_workers();

/// `impl` behind a worker: the same info(); forward and backward send the
/// problem to the worker and read the result back. `impl` must be
/// reconstructible by a worker: a registered built-in (found by name) or a
/// plugin (info().origin is its path). Exceptions the implementation throws
/// in the worker are thrown again here with their message (a
/// PluginContractError stays one). A call whose worker dies, forks, or
/// uses more than options.timeout_ms of CPU time (or kWallTimeoutFactor
/// times that of wall time) throws ImplementationDied; a call interrupted by
/// request_cancel() throws Cancelled. Throws std::logic_error when this
/// program's main() does not call worker_main().
std::shared_ptr<const Implementation> isolate(std::shared_ptr<const Implementation> impl,
                                              IsolationOptions options = {});

/// Loads plugins in workers: each path is opened by a fresh worker, which
/// validates its descriptors and sends them back; the harness process never
/// opens it. The same checks and messages as load_plugins (plugin_loader.h),
/// and a plugin that exits, crashes or hangs while loading is an InputError
/// "PATH: the plugin ... while loading". Returns isolated implementations.
std::vector<std::shared_ptr<const Implementation>> load_plugins_isolated(
    const std::vector<std::string>& paths, IsolationOptions options = {});

/// How a worker of a foreign language is started (the Python bridge's:
/// its interpreter, which imports attncheck's extension module): `program`
/// is run with `args` before the worker's own arguments and with `env`
/// (NAME=VALUE each) set over this process's environment. Whatever it runs
/// must call worker_main with the worker's arguments (the worker flag
/// first).
struct WorkerCommand {
  std::string program;
  std::vector<std::string> args;
  std::vector<std::string> env;
};

/// Builds every implementation a file declares, in a worker; throws
/// InputError (one line naming the file) when it cannot.
using WorkerLoader =
    std::function<std::vector<std::shared_ptr<const Implementation>>(const std::string& path)>;

/// Worker side: makes `mode` (not "builtin", "plugin" or "describe") a
/// kind of file a worker of this program can build implementations from.
/// The Python bridge registers "python" in the interpreter that serves as
/// its worker.
void register_worker_loader(const std::string& mode, WorkerLoader load);

/// Harness side: loads the file at `path` in a worker of `mode` started by
/// `command`; the worker runs the loader registered for `mode` and sends
/// the declarations back (the harness never runs the file's code). Each
/// becomes an isolated implementation (kind plugin, origin `path`) whose
/// calls go to a worker of that mode, started the same way. A file the
/// loader refuses is its InputError; a worker that exits, crashes or hangs
/// while loading is an InputError "PATH: the MODE worker ... while loading
/// it" (loading may take kWallTimeoutFactor x options.timeout_ms of wall
/// time).
std::vector<std::shared_ptr<const Implementation>> load_isolated(const std::string& mode,
                                                                 const std::string& path,
                                                                 const WorkerCommand& command,
                                                                 IsolationOptions options = {});

/// The worker's entry point. Call it first thing in main(): in a worker
/// (argv[1] is the worker flag) it serves the harness and returns the
/// process's exit code; otherwise it returns nullopt at once (and records
/// that this program can host workers).
std::optional<int> worker_main(int argc, char** argv);

/// The worker processes alive now (for tests: none may outlive a run).
int live_workers();

}  // namespace attncheck
