#pragma once
// Built-in modules: implementations built with attncheck but kept out of
// its program because of what they link, loaded when needed. The LibTorch
// adapters are one (attncheck_torch.so): LibTorch takes seconds to start,
// and every isolated implementation runs in a freshly started worker.

#include <string>
#include <vector>

namespace attncheck {

/// Loads every built-in module (attncheck_*.so beside this program, or in
/// ../lib/attncheck/ from it, as installed) once; their static registrars
/// add their implementations to the registry. Returns one line per module
/// that could not be loaded (empty when all loaded or there are none).
std::vector<std::string> load_builtin_modules();

}  // namespace attncheck
