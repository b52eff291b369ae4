#include "attncheck/registry.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace attncheck {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const Implementation>, std::less<>> impls;
  std::function<void(std::string_view)> loader;  // set_impl_loader
};

// Function-local so registrars in other translation units may run first.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool valid_impl_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

void register_impl(std::shared_ptr<const Implementation> impl) {
  if (!impl) throw std::invalid_argument("register_impl: null implementation");
  const std::string& name = impl->info().name;
  if (!valid_impl_name(name)) {
    throw std::invalid_argument("implementation name '" + name +
                                "' is not of the form [a-z0-9_.-]+");
  }
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.impls.emplace(name, std::move(impl)).second) {
    throw std::invalid_argument("implementation name '" + name +
                                "' is registered twice");
  }
}

std::vector<std::shared_ptr<const Implementation>> registered_impls() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::shared_ptr<const Implementation>> out;
  for (const auto& [name, impl] : r.impls) out.push_back(impl);
  return out;
}

namespace {

std::shared_ptr<const Implementation> find_registered(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.impls.find(name);
  return it == r.impls.end() ? nullptr : it->second;
}

// The loader, copied out of the lock (it registers, which locks).
std::function<void(std::string_view)> loader() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.loader;
}

}  // namespace

std::vector<std::shared_ptr<const Implementation>> every_impl() {
  if (const auto load = loader()) load("");
  return registered_impls();
}

std::shared_ptr<const Implementation> find_impl(std::string_view name) {
  if (auto impl = find_registered(name)) return impl;
  const auto load = loader();
  if (!load) return nullptr;
  load(name);
  return find_registered(name);
}

void set_impl_loader(std::function<void(std::string_view name)> f) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.loader = std::move(f);
}

namespace detail {
Registrar::Registrar(std::function<std::shared_ptr<const Implementation>()> f) {
  register_impl(f());
}
}  // namespace detail

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::reference: return "reference";
    case Kind::adapter: return "adapter";
    case Kind::layer: return "layer";
    case Kind::broken: return "broken";
    case Kind::plugin: return "plugin";
  }
  return "unknown";
}

}  // namespace attncheck
