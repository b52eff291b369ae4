#pragma once
// The reading of a comparison: what its points say about the compared
// thing, as lines of text for the output and the report's "analysis". The
// series, baseline and targets come from the sweep (presets.h); no
// implementation is named here.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "machine.h"
#include "point.h"
#include "presets.h"

namespace attncheck::bench {

/// The figure a curve follows.
enum class Measure { wall, cpu, memory };

/// The point of series `label` at length `seq` that ran (status ok), or null.
const Point* find_point(const std::vector<Point>& points, const std::string& label, int64_t seq);

/// (T, figure) of every point of series `label` that ran: the median wall
/// time, the median CPU time, or the peak bytes (0 where not measured).
std::vector<std::pair<double, double>> curve(const std::vector<Point>& points, const std::string& label,
                                             Measure measure);

/// The lines sw.reading concludes from `points` (sw's own) on machine `m`.
std::vector<std::string> read_sweep(const Sweep& sw, const std::vector<Point>& points, const Machine& m);

}  // namespace attncheck::bench
