#include "plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace attncheck::bench {
namespace {

constexpr double kChartW = 420, kChartH = 260, kLeft = 70, kTop = 40, kGap = 110;
constexpr double kLegendW = 260, kRowH = kChartH + 90;
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

std::string value_label(double v, bool bytes) {
  // The axis ticks are decades, so bytes are labelled in decimal units
  // (1 MB, 10 MB), which name a decade exactly.
  if (bytes) {
    if (v >= 1e9) return fmt::format("{:g} GB", v / 1e9);
    if (v >= 1e6) return fmt::format("{:g} MB", v / 1e6);
    if (v >= 1e3) return fmt::format("{:g} kB", v / 1e3);
    return fmt::format("{:g} B", v);
  }
  if (v >= 1) return fmt::format("{:g} s", v);
  if (v >= 1e-3) return fmt::format("{:g} ms", v * 1e3);
  return fmt::format("{:g} us", v * 1e6);
}

// One log-log chart at (x0, y0) of the points `pick` selects.
template <typename Pick>
std::string chart(const std::vector<PlotSeries>& series, Pick pick, double x0, double y0,
                  const std::string& title, bool bytes) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = 0;
  double ymin = std::numeric_limits<double>::infinity(), ymax = 0;
  for (const auto& s : series)
    for (const auto& [x, y] : pick(s)) {
      if (x <= 0 || y <= 0) continue;
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  std::string svg = fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n",
      x0, y0, kChartW, kChartH, x0 + kChartW / 2, y0 - 8, escape(title));
  if (xmax <= 0) {
    return svg + fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n",
                             x0 + kChartW / 2, y0 + kChartH / 2);
  }
  const double lx0 = std::floor(std::log2(xmin)), lx1 = std::max(lx0 + 1, std::ceil(std::log2(xmax)));
  const double ly0 = std::floor(std::log10(ymin)), ly1 = std::max(ly0 + 1, std::ceil(std::log10(ymax)));
  const auto px = [&](double x) { return x0 + (std::log2(x) - lx0) / (lx1 - lx0) * kChartW; };
  const auto py = [&](double y) { return y0 + kChartH - (std::log10(y) - ly0) / (ly1 - ly0) * kChartH; };
  for (double e = lx0; e <= lx1; ++e) {
    const double x = px(std::exp2(e));
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\" font-size=\"11\">{4:g}</text>\n",
        x, y0, y0 + kChartH, y0 + kChartH + 14, std::exp2(e));
  }
  for (double e = ly0; e <= ly1; ++e) {
    const double y = py(std::pow(10.0, e));
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4}\" text-anchor=\"end\" font-size=\"11\">{5}</text>\n",
        x0, y, x0 + kChartW, x0 - 4, y + 4, value_label(std::pow(10.0, e), bytes));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">sequence length T</text>\n",
                     x0 + kChartW / 2, y0 + kChartH + 30);
  for (size_t k = 0; k < series.size(); ++k) {
    const char* colour = kColours[k % std::size(kColours)];
    std::string points;
    for (const auto& [x, y] : pick(series[k])) {
      if (x <= 0 || y <= 0) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x), py(y), colour);
    }
    if (!points.empty()) {
      svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
                         points, colour);
    }
  }
  return svg;
}

}  // namespace

std::string render_svg(const std::vector<PlotRow>& rows) {
  const double width = kLeft + 2 * kChartW + kGap + kLegendW;
  const double height = kTop + kRowH * static_cast<double>(std::max<size_t>(1, rows.size()));
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y0 = kTop + kRowH * static_cast<double>(r);
    const auto& series = rows[r].series;
    svg += chart(series, [](const PlotSeries& s) { return s.time_s; }, kLeft, y0,
                 rows[r].title + ": median time", false);
    svg += chart(series, [](const PlotSeries& s) { return s.peak_bytes; }, kLeft + kChartW + kGap, y0,
                 rows[r].title + ": peak memory", true);
    const double lx = kLeft + 2 * kChartW + kGap + 20;
    for (size_t k = 0; k < series.size(); ++k) {
      const double ly = y0 + 10 + 18 * static_cast<double>(k);
      svg += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>"
          "<text x=\"{4}\" y=\"{5}\" font-size=\"12\">{6}</text>\n",
          lx, ly, lx + 20, kColours[k % std::size(kColours)], lx + 26, ly + 4, escape(series[k].label));
    }
  }
  return svg + "</svg>\n";
}

}  // namespace attncheck::bench
