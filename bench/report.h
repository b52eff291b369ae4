#pragma once
// The bench's JSON report (format attncheck-bench-1): the run's settings,
// the machine, every point with its figures, and the comparisons' readings.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "machine.h"
#include "options.h"
#include "point.h"

namespace attncheck::bench {

/// One line of a comparison's reading, as the report's "analysis" lists it.
struct ReadingLine {
  std::string comparison;  ///< the sweep's name
  std::string text;
};

/// The report document: format, attncheck version, seed, threads and
/// preset of `opt`, the machine `m`, one result per point (its spec, group,
/// figures, allowed pairs and GFLOP/s; the GRU's hidden size) and
/// `analysis`.
nlohmann::json report_json(const BenchOptions& opt, const Machine& m, const std::vector<Point>& points,
                           const std::vector<ReadingLine>& analysis);

/// Writes `doc` to `path`, indented; throws InputError naming --report
/// when the file cannot be written.
void write_report(const std::string& path, const nlohmann::json& doc);

}  // namespace attncheck::bench
