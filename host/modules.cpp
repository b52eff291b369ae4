#include "host/modules.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "attncheck/registry.h"

namespace attncheck {
namespace {

struct Module {
  std::filesystem::path path;
  std::string prefix;  ///< NAME_ of attncheck_NAME.so
  bool tried = false;
};

struct Modules {
  std::mutex mutex;  // held while loading: a module's registrars never load one
  std::vector<Module> found;
};

// The modules beside the program, or installed in ../lib/attncheck/ from
// it: the first of the two folders that has any wins.
Modules& modules() {
  static Modules* m = [] {
    auto* ms = new Modules;  // never destroyed: dlopen'ed code may outlive statics
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return ms;
    const auto dir = exe.parent_path();
    for (const auto& where : {dir, dir / ".." / "lib" / "attncheck"}) {
      for (const auto& e : std::filesystem::directory_iterator(where, ec)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with("attncheck_") && e.path().extension() == ".so") {
          const std::string stem = e.path().stem().string();
          ms->found.push_back({e.path(), stem.substr(std::string_view("attncheck_").size()) + "_"});
        }
      }
      if (!ms->found.empty()) break;  // the modules beside the program win
    }
    std::sort(ms->found.begin(), ms->found.end(),
              [](const Module& a, const Module& b) { return a.path < b.path; });
    return ms;
  }();
  return *m;
}

std::set<std::string> registered_names() {
  std::set<std::string> names;
  for (const auto& impl : registered_impls()) names.insert(impl->info().name);
  return names;
}

}  // namespace

std::vector<std::string> load_builtin_modules_for(std::string_view name) {
  Modules& ms = modules();
  std::lock_guard lock(ms.mutex);
  std::vector<std::string> problems;
  for (Module& m : ms.found) {
    if (m.tried || !(name.empty() || name.starts_with(m.prefix))) continue;
    m.tried = true;
    const std::set<std::string> before = registered_names();
    // RTLD_GLOBAL: not needed by attncheck, but LibTorch's own
    // libraries expect their symbols to be found across objects.
    if (!::dlopen(m.path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      const char* e = ::dlerror();
      problems.push_back(fmt::format("{}: cannot load this built-in module: {}",
                                     m.path.string(), e ? e : "unknown error"));
      continue;
    }
    // Its names must carry its prefix, or find_impl could not find them
    // without loading every module.
    for (const std::string& added : registered_names()) {
      if (!before.contains(added) && !added.starts_with(m.prefix)) {
        problems.push_back(fmt::format(
            "{}: built-in module registers '{}', a name outside its prefix '{}' (only `attncheck "
            "list` and the default set find it)",
            m.path.string(), added, m.prefix));
      }
    }
  }
  return problems;
}

std::vector<std::string> load_builtin_modules() { return load_builtin_modules_for(""); }

void install_module_loader(void (*report)(const std::string& problem)) {
  set_impl_loader([report](std::string_view name) {
    for (const std::string& problem : load_builtin_modules_for(name))
      if (report) report(problem);
  });
}

}  // namespace attncheck
