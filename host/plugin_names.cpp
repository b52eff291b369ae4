// The names of the implementations plugins bring (host/plugin_names.h).

#include "host/plugin_names.h"

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"

namespace attncheck::host_detail {

void PluginNames::add(const std::string& path,
                      const std::vector<std::shared_ptr<const Implementation>>& impls) {
  for (const auto& impl : impls) {
    const std::string& name = impl->info().name;
    if (find_impl(name)) {
      throw InputError(
          fmt::format("{}: implementation '{}' has the name of a built-in "
                      "implementation (see attncheck list); rename it",
                      path, name));
    }
    if (const auto [it, fresh] = origin_.emplace(name, path); !fresh) {
      throw InputError(
          fmt::format("{}: implementation '{}' is also exported by {}", path, name, it->second));
    }
  }
}

}  // namespace attncheck::host_detail
