#pragma once
// The bench's figure: time and peak memory against sequence length, one
// line per series, as an SVG written directly (no plotting dependency).

#include <string>
#include <utility>
#include <vector>

namespace attncheck::bench {

/// One line: (sequence length, value) points in increasing length.
struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> time_s;      ///< median seconds
  std::vector<std::pair<double, double>> peak_bytes;  ///< peak resident bytes
};

/// One comparison: a row of the figure with a time chart and a memory chart.
struct PlotRow {
  std::string title;
  std::vector<PlotSeries> series;
};

/// The SVG document: one row per comparison, both axes logarithmic (base
/// 2 for length, base 10 for time and bytes), a legend per row. Points with
/// values <= 0 are left out (a peak below the page size reads as 0).
std::string render_svg(const std::vector<PlotRow>& rows);

}  // namespace attncheck::bench
