#include "attncheck/fixture.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"
#include "formats/json.h"

namespace attncheck {

ExpectedFailures load_expected_failures(const std::string& path) {
  ExpectedFailures out;
  out.path = path;
  if (!std::ifstream(path)) return out;  // no file: nothing expected to fail
  const nlohmann::json j = read_json_file(path);  // size and nesting limits
  const nlohmann::json& list = j.is_object() ? j.value("expected_failures", nlohmann::json()) : j;
  if (!list.is_array()) throw InputError(path + ": expected an array of {impl, property, reason}");
  for (const auto& e : list) {
    if (!e.is_object() || !e.contains("impl") || !e.contains("property") ||
        !e["impl"].is_string() || !e["property"].is_string()) {
      throw InputError(path + ": every entry needs string fields 'impl' and 'property'");
    }
    out.entries.emplace(e["impl"].get<std::string>(), e["property"].get<std::string>());
  }
  return out;
}

}  // namespace attncheck
