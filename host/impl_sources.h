#pragma once
// Where the implementations a command calls come from: the built-ins (the
// registry), plugins (dlopen, in this process or behind a worker) and
// Python files (always behind a worker), found by name. The one place the
// command line, the bench and the Python module load them.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"
#include "host/isolation.h"

namespace attncheck {

using ImplList = std::vector<std::shared_ptr<const Implementation>>;

/// The implementations beyond the built-ins, and how they are called.
struct ImplSources {
  /// Shared libraries exporting attncheck_plugin_impls (--plugin); a path
  /// ending in .py is a Python file (reproduce lines of older versions
  /// name a Python file's origin with --plugin).
  std::vector<std::string> plugins;
  /// Python files, FILE.py or FILE.py:NAME (--python): all the file
  /// declares, or the named ones.
  std::vector<std::string> python;
  /// Plugins load and run in this process (--no-isolation; the bench,
  /// which measures them). A Python file's code never runs here.
  bool in_process = false;
  /// The CPU time limit of an isolated call.
  int64_t timeout_ms = kDefaultCallTimeoutMs;
  /// The memory limit of a worker (IsolationOptions::memory_limit_mb).
  int64_t memory_limit_mb = kMemoryLimitHalfOfMachine;
  /// How a Python file is served; nullopt = python_worker_command().
  std::optional<WorkerCommand> python_worker;
  /// Prefix of the messages about a Python file ("--python"; empty: none).
  std::string python_label = "--python";
};

/// Loads the plugins and Python files of `sources` (plugins behind workers
/// unless in_process: the harness never opens a plugin in-process it has
/// not seen load safely). Throws InputError for a file that does not load,
/// a name a Python file does not declare, or two implementations of one
/// name (load_plugins).
ImplList load_sources(const ImplSources& sources);

/// load_sources for the commands that check (check, list, describe,
/// replay): in_process with a Python file is refused ("--python: a Python
/// implementation runs only in a worker ...").
ImplList load_for_checking(const ImplSources& sources);

/// The implementation of this name among `loaded` and the built-ins
/// (load_sources has made the names unique), or nullptr.
std::shared_ptr<const Implementation> find_implementation(const ImplList& loaded,
                                                          std::string_view name);

/// `impl` as the checks call it: behind a worker unless in_process.
std::shared_ptr<const Implementation> for_calls(std::shared_ptr<const Implementation> impl,
                                                const ImplSources& sources);

/// How a Python file's implementations are served: by the interpreter this
/// attncheck was built with (or ATTNCHECK_PYTHON) running
/// attncheck._worker, the package found beside the program (python/) or
/// where it was installed. Throws InputError when there is none.
WorkerCommand python_worker_command();

}  // namespace attncheck
