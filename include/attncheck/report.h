#pragma once
// The --report JSON of SPEC 5.2.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/outcome.h"
#include "attncheck/version.h"

namespace attncheck {

/// {"format": "attncheck-report-1", "attncheck", "seed", "profile", "results"}.
nlohmann::json report_json(const std::vector<PropertyOutcome>& outcomes,
                           uint64_t seed, const std::string& profile);

}  // namespace attncheck
