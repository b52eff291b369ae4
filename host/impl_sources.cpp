// Where implementations come from (host/impl_sources.h).

#include "host/impl_sources.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attncheck/dtype.h"
#include "host/plugin_loader.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

// "FILE.py:NAME" as (FILE.py, NAME), "FILE.py" as (FILE.py, "").
std::pair<std::string, std::string> split_python_spec(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || spec.find('/', colon) != std::string::npos) return {spec, ""};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

// How a Python file's implementations are served (docs/python.md): by the
// interpreter this attncheck was built with (or ATTNCHECK_PYTHON) running
// attncheck._worker, the package found beside the program (build/python/)
// or where it was installed.
}  // namespace

WorkerCommand python_worker_command() {
#ifdef ATTNCHECK_PYTHON_EXECUTABLE
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::string package;
  for (const fs::path& where : {dir / "python", dir / ".." / ATTNCHECK_PYTHON_INSTALL_DIR}) {
    if (fs::exists(where / "attncheck" / "__init__.py", ec)) {
      package = fs::weakly_canonical(where, ec).string();
      break;
    }
  }
  if (package.empty()) {
    throw InputError("--python: the attncheck Python package is neither beside this program "
                     "(python/) nor installed (" ATTNCHECK_PYTHON_INSTALL_DIR ")");
  }
  const char* python = std::getenv("ATTNCHECK_PYTHON");
  const char* path = std::getenv("PYTHONPATH");
  return {python && *python ? python : ATTNCHECK_PYTHON_EXECUTABLE,
          {"-m", "attncheck._worker"},
          {fmt::format("PYTHONPATH={}{}{}", package, path && *path ? ":" : "",
                       path && *path ? path : ""),
           "PYTHONUNBUFFERED=1"}};
#else
  throw InputError("--python: this attncheck was built without its Python module (Python 3 "
                   "with NumPy and pybind11 were not found)");
#endif
}

// The plugins and the Python files of `sources` (FILE.py[:NAME];
// a --plugin path ending in .py is a Python file too, as reproduce lines
// of older versions name a Python file's origin with --plugin). A Python
// file's implementations always run in workers: the harness never runs a
// Python file's code. The plugins load in workers too unless `in_process`
// (--no-isolation; the bench, which measures them):
// the harness never opens a plugin it has not seen load safely.
ImplList load_sources(const ImplSources& sources) {
  const std::vector<std::string>& paths = sources.plugins;
  const bool plugins_in_process = sources.in_process;
  const int64_t timeout_ms = sources.timeout_ms;
  const std::string label =
      sources.python_label.empty() ? std::string() : fmt::format("{}: ", sources.python_label);
  std::map<std::string, std::vector<std::string>> wanted;  // Python file -> names ({} = all)
  std::vector<std::string> files = paths;
  for (const std::string& spec : sources.python) {
    const auto [file, name] = split_python_spec(spec);
    if (file.empty()) throw InputError(fmt::format("{}'{}' names no file", label, spec));
    if (!wanted.count(file)) files.push_back(file);
    if (!name.empty()) wanted[file].push_back(name);
    else wanted[file];
  }
  for (const std::string& path : paths)
    if (path.ends_with(".py")) wanted[path];
  if (wanted.empty()) {
    if (plugins_in_process) return load_plugins(files);
    return load_plugins_isolated(files, IsolationOptions{timeout_ms, sources.memory_limit_mb});
  }
  const WorkerCommand command = sources.python_worker ? *sources.python_worker : python_worker_command();
  const IsolationOptions options{timeout_ms, sources.memory_limit_mb};
  return load_plugins(files, [&](const std::string& path) {
    const auto it = wanted.find(path);
    if (it == wanted.end()) {
      return plugins_in_process ? load_plugin(path) : load_plugins_isolated({path}, options);
    }
    ImplList impls = load_isolated("python", path, command, options);
    if (it->second.empty()) return impls;
    ImplList chosen;
    for (const std::string& name : it->second) {
      const auto found = std::find_if(impls.begin(), impls.end(),
                                      [&](const auto& i) { return i->info().name == name; });
      if (found == impls.end()) {
        std::vector<std::string> names;
        for (const auto& i : impls) names.push_back(i->info().name);
        throw InputError(fmt::format("{}{} declares no implementation '{}' (it declares: {})",
                                     label, path, name,
                                     names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
      }
      chosen.push_back(*found);
    }
    return chosen;
  });
}

// load_sources for check, list, describe and replay: with
// --no-isolation the plugins load in this process, and a Python file is
// refused (it runs only in a worker).
ImplList load_for_checking(const ImplSources& sources) {
  const std::vector<std::string>& paths = sources.plugins;
  const bool any_python =
      !sources.python.empty() ||
      std::any_of(paths.begin(), paths.end(), [](const auto& p) { return p.ends_with(".py"); });
  if (sources.in_process && any_python) {
    throw InputError("--python: a Python implementation runs only in a worker (without "
                     "--no-isolation)");
  }
  return load_sources(sources);
}

std::shared_ptr<const Implementation> find_implementation(const ImplList& loaded,
                                                          std::string_view name) {
  for (const auto& impl : loaded)
    if (impl->info().name == name) return impl;
  return find_impl(name);
}

std::shared_ptr<const Implementation> for_calls(std::shared_ptr<const Implementation> impl,
                                                const ImplSources& sources) {
  if (sources.in_process) return impl;
  return isolate(std::move(impl), IsolationOptions{sources.timeout_ms, sources.memory_limit_mb});
}

}  // namespace attncheck
