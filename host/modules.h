#pragma once
// Built-in modules: implementations built with attncheck but kept out of
// its program because of what they link, loaded when needed. The LibTorch
// adapters are one (attncheck_torch.so): LibTorch takes seconds to start,
// and every isolated implementation runs in a freshly started worker.
//
// A module attncheck_NAME.so names its implementations NAME_* (torch_*,
// ggml_*): that is how a name finds its module without loading the others,
// so that a command which needs none of them (a plugin's check, `replay`
// of a built-in's fixture) does not start LibTorch.

#include <string>
#include <string_view>
#include <vector>

namespace attncheck {

/// Loads every built-in module (attncheck_*.so beside this program, or in
/// ../lib/attncheck/ from it, as installed) not loaded yet; their static
/// registrars add their implementations to the registry. Returns one line
/// per module that could not be loaded, or that registered a name outside
/// its prefix (empty when all loaded or there are none); a module's
/// problems are returned once, by the call that loaded it.
std::vector<std::string> load_builtin_modules();

/// The same for the modules whose prefix `name` starts with (all of them
/// for an empty name): what the registry's on-demand loader calls
/// (set_impl_loader, install_module_loader).
std::vector<std::string> load_builtin_modules_for(std::string_view name);

/// Makes the built-in modules load on demand (attncheck/registry.h's
/// set_impl_loader): find_impl of a module's name or every_impl() loads
/// them; `report` is given each problem line.
void install_module_loader(void (*report)(const std::string& problem));

}  // namespace attncheck
