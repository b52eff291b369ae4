#include "attncheck/report.h"


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

}  // namespace attncheck
