#pragma once
// What the loader needs of descriptor validation beyond
// validate_plugin_descriptor (host/plugin_loader.h): the message for
// an abi_version this harness does not speak, and the bounds on a version 2
// descriptor's struct_size and on its paths' (SPEC 5.1: later additions to
// version 2 only append, so any size from the first layout up is read).

#include <cstddef>
#include <cstdint>
#include <string>

#include "attncheck/plugin.h"

namespace attncheck::host_detail {

/// A struct_size past this is garbage, not a larger future descriptor.
inline constexpr uint32_t kMaxStructSize = 4096;

/// The first version 2 layout of attncheck_impl, which ended at combos: a
/// plugin built against that header has this struct_size, and the fields
/// appended since (stages, n_paths, paths, last_path) read as zero for it.
inline constexpr uint32_t kFirstV2ImplSize = offsetof(attncheck_impl, stages);
static_assert(kFirstV2ImplSize == offsetof(attncheck_impl, combos) + sizeof(void*),
              "the first version 2 layout ends right after combos");

/// The first layout of attncheck_path: a path's struct_size is at least
/// this (fields appended to it later read as zero for an older plugin).
inline constexpr uint32_t kFirstPathSize = sizeof(attncheck_path);

/// A bound that only a garbage descriptor's n_paths exceeds.
inline constexpr uint32_t kMaxPaths = 64;

/// "abi_version is V, but this attncheck speaks ATTNCHECK_ABI_VERSION 1
/// and 2 (...)".
std::string unknown_version(uint32_t version);

}  // namespace attncheck::host_detail
