#pragma once
// This build of attncheck: its version, and the registry of built-in
// implementations, filled by static registrars (like google/benchmark's
// BENCHMARK) or at run time by register_impl().

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"

namespace attncheck {

/// "0.1.0": the project version CMake configured.
const char* version();

/// Adds an implementation; throws std::invalid_argument if its name is
/// malformed or already taken.
void register_impl(std::shared_ptr<const Implementation> impl);

/// Every implementation registered so far, sorted by name: without an
/// on-demand loader (set_impl_loader) that is every one there is.
std::vector<std::shared_ptr<const Implementation>> registered_impls();

/// Every implementation, sorted by name: the on-demand loader, if any, is
/// asked for all of its implementations first.
std::vector<std::shared_ptr<const Implementation>> every_impl();

/// The implementation with this name, or nullptr; a name not registered
/// yet is first passed to the on-demand loader, if any.
std::shared_ptr<const Implementation> find_impl(std::string_view name);

/// Installs a loader of implementations registered on demand (the
/// attncheck command's built-in modules, host/modules.h, which take
/// seconds to start): find_impl calls it with a name it does not know,
/// every_impl() with an empty name ("all"); always outside the registry's
/// lock, so that it may register implementations. Replaces any earlier
/// loader; an empty function removes it.
void set_impl_loader(std::function<void(std::string_view name)> loader);

/// True for names of the form [a-z0-9_.-]+.
bool valid_impl_name(std::string_view name);

namespace detail {
/// Registers at static-initialisation time; use ATTNCHECK_REGISTER_IMPL.
struct Registrar {
  explicit Registrar(std::function<std::shared_ptr<const Implementation>()> f);
};
}  // namespace detail

}  // namespace attncheck

#define ATTNCHECK_CONCAT_INNER_(a, b) a##b
#define ATTNCHECK_CONCAT_(a, b) ATTNCHECK_CONCAT_INNER_(a, b)

/// Registers the implementation made by the expression `...` (a
/// std::shared_ptr<const Implementation> or convertible) before main().
#define ATTNCHECK_REGISTER_IMPL(...)                                      \
  static const ::attncheck::detail::Registrar ATTNCHECK_CONCAT_(          \
      attncheck_registrar_, __LINE__)([] {                               \
    return std::shared_ptr<const ::attncheck::Implementation>(__VA_ARGS__); \
  })
