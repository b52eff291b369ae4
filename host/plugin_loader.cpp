// Loading plugins in this process (host/plugin_loader.h): the shared
// object opened with dlopen, its descriptor array read at the stride of its
// ABI version (version 2: its struct_size, any size from the first version
// 2 layout up, the fields a shorter descriptor lacks read as zero), each
// descriptor validated and wrapped, and the names of all the plugins'
// implementations kept unique.

#include "host/plugin_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "attncheck/dtype.h"
#include "host/abi_marshal.h"
#include "host/descriptor_validation.h"
#include "host/plugin_names.h"

namespace attncheck {
namespace {

using host_detail::Abi;

// dlerror()'s text, without the file name dlopen already put in front.
std::string dl_message(const std::string& opened) {
  const char* e = dlerror();
  std::string m = e ? e : "unknown dlopen error";
  if (m.rfind(opened + ": ", 0) == 0) m.erase(0, opened.size() + 2);
  std::replace(m.begin(), m.end(), '\n', ' ');
  return m;
}

// The descriptors of one plugin's array, read at the stride of their
// version; throws InputError naming the first defect.
template <uint32_t Version>
std::vector<std::shared_ptr<const Implementation>> load_descriptors(
    const unsigned char* base, size_t count, size_t stride, const std::string& path,
    const std::shared_ptr<void>& keep_alive) {
  std::map<std::string, size_t> seen;
  std::vector<std::shared_ptr<const Implementation>> impls;
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* at = base + i * stride;
    uint32_t version = 0;
    std::memcpy(&version, at, sizeof version);
    if (version != Version) {
      throw InputError(fmt::format(
          "{}: descriptor {}: abi_version is {}, but descriptor 0's is {} (all descriptors of a "
          "plugin share one ABI version)",
          path, i, version, Version));
    }
    // SPEC 5.1: later additions to version 2 only append. A descriptor
    // built against an older header is shorter than ours: only its own
    // bytes are read, and the fields it lacks stay zero (not declared).
    typename Abi<Version>::Descriptor d{};
    std::memcpy(&d, at, std::min(stride, sizeof d));
    if constexpr (Version >= 2) {
      if (d.struct_size != stride) {
        throw InputError(fmt::format(
            "{}: descriptor {}: struct_size is {}, but descriptor 0's is {} (the array stride)",
            path, i, d.struct_size, stride));
      }
    }
    validate_plugin_descriptor(d, i, path);
    const std::string name = d.name;
    if (const auto [it, fresh] = seen.emplace(name, i); !fresh) {
      throw InputError(fmt::format("{}: descriptor {} (name '{}'): descriptor {} has the same name",
                                   path, i, name, it->second));
    }
    impls.push_back(make_plugin_impl(d, path, keep_alive));
  }
  return impls;
}

}  // namespace

std::vector<std::shared_ptr<const Implementation>> load_plugin(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": is a directory, not a shared object");
  // Without a slash dlopen searches the library path instead of the file.
  const std::string opened = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void* handle = dlopen(opened.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    throw InputError(
        fmt::format("{}: cannot load it as a shared object: {}", path, dl_message(opened)));
  }
  std::shared_ptr<void> keep_alive(handle, [](void* h) { dlclose(h); });
  void* symbol = dlsym(handle, "attncheck_plugin_impls");
  if (!symbol) {
    throw InputError(path + ": does not export attncheck_plugin_impls (see attncheck/plugin.h)");
  }
  // The array's element type depends on its version, so it is read as
  // bytes: POSIX guarantees a data pointer from dlsym converts to a
  // function pointer, and the returned pointer is read through memcpy.
  using ListFn = const void* (*)(size_t*);
  ListFn list = nullptr;
  static_assert(sizeof list == sizeof symbol);
  std::memcpy(&list, &symbol, sizeof list);
  size_t count = 0;
  const auto* descriptors = static_cast<const unsigned char*>(list(&count));
  if (!descriptors) throw InputError(path + ": attncheck_plugin_impls returned NULL");
  if (count == 0)
    throw InputError(path + ": attncheck_plugin_impls exports no implementation (count 0)");
  if (count > 4096) {
    throw InputError(
        fmt::format("{}: attncheck_plugin_impls gave an implausible count {}", path, count));
  }
  // SPEC 5.1: abi_version first, then the array at that version's stride.
  uint32_t version = 0;
  std::memcpy(&version, descriptors, sizeof version);
  if (version == ATTNCHECK_V1_ABI_VERSION) {
    return load_descriptors<1>(descriptors, count, sizeof(attncheck_v1_impl), path,
                                   keep_alive);
  }
  if (version != ATTNCHECK_ABI_VERSION) {
    throw InputError(fmt::format("{}: descriptor 0: {}", path, host_detail::unknown_version(version)));
  }
  uint32_t stride = 0;
  std::memcpy(&stride, descriptors + offsetof(attncheck_impl, struct_size), sizeof stride);
  // Any size from the first version 2 layout up: a plugin built against an
  // older version 2 header keeps loading (SPEC 5.1).
  if (stride < host_detail::kFirstV2ImplSize) {
    throw InputError(fmt::format(
        "{}: descriptor 0: struct_size is {}, smaller than version 2's attncheck_impl ({} "
        "bytes): set it to sizeof(attncheck_impl)",
        path, stride, host_detail::kFirstV2ImplSize));
  }
  if (stride > host_detail::kMaxStructSize) {
    throw InputError(
        fmt::format("{}: descriptor 0: implausible struct_size {}", path, stride));
  }
  return load_descriptors<2>(descriptors, count, stride, path, keep_alive);
}

std::vector<std::shared_ptr<const Implementation>> load_plugins(
    const std::vector<std::string>& paths, const PluginLoader& loader) {
  std::vector<std::shared_ptr<const Implementation>> all;
  host_detail::PluginNames names;
  for (const std::string& path : paths) {
    auto impls = loader(path);
    names.add(path, impls);
    for (auto& impl : impls) all.push_back(std::move(impl));
  }
  return all;
}

}  // namespace attncheck
