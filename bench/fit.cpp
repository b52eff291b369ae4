#include "fit.h"

#include <cmath>

#include <fmt/format.h>

namespace attncheck::bench {

std::optional<double> growth(const std::vector<std::pair<double, double>>& points) {
  std::vector<std::pair<double, double>> l;
  for (const auto& [x, y] : points)
    if (x > 0 && y > 0) l.emplace_back(std::log(x), std::log(y));
  if (l.size() < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (const auto& [x, y] : l) {
    mx += x;
    my += y;
  }
  mx /= static_cast<double>(l.size());
  my /= static_cast<double>(l.size());
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : l) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  return sxx > 0 ? std::optional<double>(sxy / sxx) : std::nullopt;
}

std::string slope_text(std::optional<double> slope) {
  return slope ? fmt::format("T^{:.2f}", *slope) : "n/a";
}

}  // namespace attncheck::bench
