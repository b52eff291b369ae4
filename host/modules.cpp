#include "host/modules.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <system_error>

#include <fmt/format.h>

namespace attncheck {

std::vector<std::string> load_builtin_modules() {
  static std::once_flag once;
  static std::vector<std::string> problems;
  std::call_once(once, [] {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return;
    const auto dir = exe.parent_path();
    for (const auto& where : {dir, dir / ".." / "lib" / "attncheck"}) {
      std::vector<std::filesystem::path> found;
      for (const auto& e : std::filesystem::directory_iterator(where, ec)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with("attncheck_") && e.path().extension() == ".so") {
          found.push_back(e.path());
        }
      }
      std::sort(found.begin(), found.end());
      for (const auto& path : found) {
        // RTLD_GLOBAL: not needed by attncheck, but LibTorch's own
        // libraries expect their symbols to be found across objects.
        if (!::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
          const char* e = ::dlerror();
          problems.push_back(fmt::format("{}: cannot load this built-in module: {}",
                                         path.string(), e ? e : "unknown error"));
        }
      }
      if (!found.empty()) return;  // the modules beside the program win
    }
  });
  return problems;
}

}  // namespace attncheck
