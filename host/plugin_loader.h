#pragma once
// Loading out-of-tree implementations through the C ABI of plugin.h: the
// shared object is opened with dlopen, every descriptor it exports is
// checked, and each becomes an Implementation of kind `plugin` whose calls
// convert problems to the C structs and guard every output buffer. Both
// versions of the ABI load: version 1 through the frozen structs of
// plugin_v1.h (attncheck_v1_*), version 2 through plugin.h's.

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/plugin.h"
#ifndef ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY
#define ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY
#endif
#include "attncheck/plugin_v1.h"

namespace attncheck {

/// Thrown by a plugin implementation's forward or backward when the plugin
/// broke the C ABI's contract in that call: it wrote outside an output
/// buffer (a guard region or a gap of a strided layout), left an output
/// element unwritten (still the sentinel NaN) after returning ATTNCHECK_OK,
/// or returned a code other than OK, ERROR and UNSUPPORTED. The properties
/// turn it into a failed case whose message names the buffer and offset.
class PluginContractError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Elements of guard region on each side of every output buffer handed to a
/// plugin; they hold a NaN pattern of their own, checked after each call.
inline constexpr int64_t kPluginGuardElements = 64;

/// Checks version 2 descriptor number `index` of the shared object `origin`
/// against SPEC 5.1: abi_version 2 and a struct_size of at least the first
/// version 2 layout (host_detail::kFirstV2ImplSize), a valid name, dtypes
/// and features of known bits only (at least one dtype or combination), a
/// forward function (and a backward one when FEATURE_BACKWARD is declared),
/// a known empty-row policy, known precision formats (accum: f64, f32, bf16
/// or f16; p_cast and s_cast: those or E4M3, never E5M2, whose u is past
/// SPEC 4's first-order limit), known ftz_formats bits, sane limits, and
/// combos of known formats (outputs never fp8) that agree with dtypes when
/// both are given. Where struct_size covers them (SPEC 4.1): stages of known
/// bits, a q_cast that is a float format or ATTNCHECK_Q_CAST_KV, every
/// accumulation in f64, f32, bf16 or f16; at most kMaxPaths paths, an array
/// when n_paths is not 0, each path's struct_size at least the first
/// attncheck_path layout and equal to paths[0]'s, names valid and unique,
/// each path's precision valid as the descriptor's is, and none looser
/// than the descriptor's own in any component (tighter_component).
/// Throws InputError with one line of the form
/// "ORIGIN: descriptor I (name 'x'): what is wrong".
void validate_plugin_descriptor(const attncheck_impl& d, size_t index, const std::string& origin);

/// The same checks for a version 1 descriptor (abi_version 1, the version 1
/// feature bits and formats only).
void validate_plugin_descriptor(const attncheck_v1_impl& d, size_t index,
                                const std::string& origin);

/// Wraps a valid descriptor as an Implementation of kind `plugin`. Its
/// forward converts the problem to an attncheck_problem in the real dtype
/// (contiguous unless the descriptor declares FEATURE_STRIDES; then the
/// problem's own strides, gaps holding NaN, and an output laid out in the
/// same axis order), asks for weights and lse only when declared, fills
/// every output with a sentinel NaN inside guard regions, and maps the
/// return codes: OK, ERROR (the message from outputs->error) and
/// UNSUPPORTED; contract violations throw PluginContractError. Calls are
/// serialised with a mutex, so one descriptor is never entered from two
/// threads at once. `keep_alive` is held as long as the implementation
/// lives (the dlopen handle). The problem it hands over is version 2 (its
/// abi_version 2, the formats, descales, sink and sequence layout filled,
/// dsink asked for when there is a sink); a problem that needs a version 2
/// part the descriptor does not declare (undeclared_serving_part) is refused
/// with InputError before the plugin is called. After a forward that
/// returns OK, a descriptor with last_path is asked which path the call
/// took (ForwardResult::path); an answer outside -1 .. n_paths - 1 throws
/// PluginContractError.
std::shared_ptr<const Implementation> make_plugin_impl(const attncheck_impl& d,
                                                       const std::string& origin,
                                                       std::shared_ptr<void> keep_alive = {});

/// The same for a version 1 descriptor, widened to the C++ model (s_cast =
/// accum, flush_to_zero for every format, a combination {d, d, d} per
/// dtypes bit). It is handed version 1 problems (abi_version 1) and never
/// one that needs a field of version 2: that is refused with InputError
/// before the plugin is called.
std::shared_ptr<const Implementation> make_plugin_impl(const attncheck_v1_impl& d,
                                                       const std::string& origin,
                                                       std::shared_ptr<void> keep_alive = {});

/// Opens the shared object at `path` (RTLD_NOW | RTLD_LOCAL), calls its
/// attncheck_plugin_impls and returns one implementation per descriptor, in
/// the plugin's order. The array is read by its first descriptor's
/// abi_version: version 1 at the stride sizeof(attncheck_v1_impl), version
/// 2 at its struct_size, any size from the first version 2 layout up (a
/// shorter descriptor's missing fields read as zero). Throws InputError with one line naming the file
/// and the problem: missing file, not a loadable shared object, missing
/// symbol, no descriptors, an unknown abi_version, descriptors of mixed
/// versions, a struct_size smaller than version 2's, an invalid
/// descriptor, or two descriptors of one name.
std::vector<std::shared_ptr<const Implementation>> load_plugin(const std::string& path);

/// How one file becomes implementations: load_plugin in this process, or
/// another loader of the caller's (the CLI's also loads Python files in
/// workers).
using PluginLoader =
    std::function<std::vector<std::shared_ptr<const Implementation>>(const std::string& path)>;

/// Loads every path with `loader` and checks that no implementation name
/// is used twice, across the plugins or by a built-in (registered)
/// implementation; throws InputError naming the file and the name.
std::vector<std::shared_ptr<const Implementation>> load_plugins(
    const std::vector<std::string>& paths, const PluginLoader& loader = load_plugin);

}  // namespace attncheck
