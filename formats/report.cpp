#include "attncheck/report.h"

#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "attncheck/error.h"
#include "attncheck/fixture.h"

namespace attncheck {

nlohmann::json report_json(const std::vector<PropertyOutcome>& outcomes,
                           uint64_t seed, const std::string& profile) {
  nlohmann::json results = nlohmann::json::array();
  for (const PropertyOutcome& o : outcomes) {
    nlohmann::json ce = nullptr;
    if (o.counterexample) {
      const auto& c = *o.counterexample;
      ce = {{"batch", c.batch}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
            {"tq", c.tq},       {"tk", c.tk},       {"dk", c.dk},
            {"dv", c.dv},       {"dtype", dtype_name(c.dtype)}};
    }
    results.push_back({{"impl", o.impl},
                       {"kind", kind_name(o.kind)},
                       {"dtype", dtype_name(o.dtype)},
                       {"property", o.property},
                       {"status", status_name(o.status)},
                       {"cases", o.cases},
                       {"discarded", o.discarded},
                       {"max_budget_used", o.max_budget_used},
                       {"message", o.message},
                       {"diagnosis", o.diagnosis},
                       {"fixture", o.fixture ? nlohmann::json(*o.fixture) : nlohmann::json()},
                       {"counterexample", ce}});
  }
  return {{"format", "attncheck-report-1"},
          {"attncheck", version()},
          {"seed", seed},
          {"profile", profile},
          {"results", results}};
}

nlohmann::json merge_reports(const std::vector<std::string>& paths) {
  nlohmann::json merged;
  for (const std::string& path : paths) {
    // Within the size and nesting limits; errors are one line naming the file.
    const nlohmann::json j = read_json_file(path);
    // Types checked before any value() or get<>(), which would throw
    // nlohmann's type_error: an internal error, not the file's.
    if (!j.is_object() || !j.contains("format") || j["format"] != "attncheck-report-1") {
      throw InputError(path + ": field 'format': not an attncheck-report-1 report");
    }
    if (!j.contains("results") || !j["results"].is_array()) {
      throw InputError(path + ": field 'results': expected an array of results");
    }
    for (const auto& r : j["results"]) {
      if (!r.is_object() || (r.contains("status") && !r["status"].is_string())) {
        throw InputError(path + ": field 'results': every result must be an object whose "
                                "'status' is a string");
      }
    }
    if (merged.is_null()) {
      merged = j;
      continue;
    }
    for (const char* key : {"seed", "profile"}) {
      if (j.value(key, nlohmann::json()) != merged.value(key, nlohmann::json())) {
        throw InputError(fmt::format("{}: field '{}' differs from the first report's", path, key));
      }
    }
    for (const auto& r : j["results"]) merged["results"].push_back(r);
  }
  return merged;
}

int failing_results(const nlohmann::json& report) {
  int failed = 0;
  if (!report.contains("results")) return failed;
  for (const auto& r : report["results"]) {
    const std::string st = r.value("status", "");
    failed += st == "failed" || st == "xpass";
  }
  return failed;
}

}  // namespace attncheck
