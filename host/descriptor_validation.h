#pragma once
// What the loader needs of descriptor validation beyond
// validate_plugin_descriptor (host/plugin_loader.h): the message for
// an abi_version this harness does not speak, and the bound on a version 2
// descriptor's struct_size.

#include <cstdint>
#include <string>

namespace attncheck::host_detail {

/// A struct_size past this is garbage, not a larger future descriptor.
inline constexpr uint32_t kMaxStructSize = 4096;

/// "abi_version is V, but this attncheck speaks ATTNCHECK_ABI_VERSION 1
/// and 2 (...)".
std::string unknown_version(uint32_t version);

}  // namespace attncheck::host_detail
