#pragma once
// The --report JSON of SPEC 5.2: its writer, and merge-reports' reader,
// which joins the reports of a run's shards.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/outcome.h"
#include "attncheck/version.h"

namespace attncheck {

/// {"format": "attncheck-report-1", "attncheck", "seed", "profile", "results"}.
nlohmann::json report_json(const std::vector<PropertyOutcome>& outcomes,
                           uint64_t seed, const std::string& profile);

/// Reads the reports at `paths` (at least one) and joins their results, in order, under
/// the first report's other fields. Throws InputError naming the file when
/// one is not an attncheck-report-1 report (or its results are not objects
/// with a string status) or its seed or profile differs from the first's.
nlohmann::json merge_reports(const std::vector<std::string>& paths);

/// The results of a report that fail a run: status "failed" or "xpass".
int failing_results(const nlohmann::json& report);

}  // namespace attncheck
