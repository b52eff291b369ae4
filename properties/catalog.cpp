// The property catalog: the registry the family files fill at start-up
// (ATTNCHECK_REGISTER_PROPERTY), in SPEC section 2's order, and what a run
// is configured with (profiles, budgets, the real-size switch).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "properties/case_context.h"
#include "properties/property_def.h"

namespace attncheck {
namespace {

struct Registry {
  std::map<int, PropertyDef> by_position;
  std::vector<PropertyDef> catalog;  // filled from by_position at first use
  bool sealed = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

[[noreturn]] void registration_defect(const std::string& message) {
  std::fprintf(stderr, "attncheck: defect in the property catalog: %s\n", message.c_str());
  std::abort();
}

}  // namespace

namespace detail {

PropertyRegistrar::PropertyRegistrar(int position, PropertyDef (*make)()) {
  Registry& r = registry();
  PropertyDef def = make();
  def.position = position;
  if (r.sealed) registration_defect(def.name + " registered after the catalog was first read");
  if (const auto it = r.by_position.find(position); it != r.by_position.end()) {
    registration_defect(fmt::format("{} and {} both at position {}", it->second.name, def.name,
                                    position));
  }
  for (const auto& [at, other] : r.by_position)
    if (other.name == def.name) registration_defect(def.name + " registered twice");
  r.by_position.emplace(position, std::move(def));
}

}  // namespace detail

const std::vector<PropertyDef>& property_defs() {
  Registry& r = registry();
  if (!r.sealed) {
    for (auto& [position, def] : r.by_position) r.catalog.push_back(def);
    r.sealed = true;
  }
  return r.catalog;
}

const PropertyDef* find_property_def(std::string_view name) {
  for (const PropertyDef& p : property_defs())
    if (p.name == name) return &p;
  return nullptr;
}

const PropertyDef& property_def(const PropertyInfo& info) {
  if (const PropertyDef* def = find_property_def(info.name)) return *def;
  throw InputError(fmt::format("unknown property '{}'", info.name));
}

const std::vector<PropertyInfo>& property_catalog() {
  static const std::vector<PropertyInfo> infos(property_defs().begin(), property_defs().end());
  return infos;
}

const PropertyInfo* find_property(std::string_view name) {
  for (const PropertyInfo& p : property_catalog())
    if (p.name == name) return &p;
  return nullptr;
}

std::string_view profile_name(Profile p) { return p == Profile::thorough ? "thorough" : "ci"; }

Profile parse_profile(std::string_view name) {
  for (Profile p : {Profile::ci, Profile::thorough})
    if (profile_name(p) == name) return p;
  throw InputError(fmt::format("unknown profile '{}' (expected ci or thorough)", name));
}

int case_budget(const PropertyInfo& prop, const RunConfig& config) {
  if (config.cases > 0) return config.cases;
  return config.profile == Profile::thorough ? 10 * prop.default_cases : prop.default_cases;
}

}  // namespace attncheck
