#pragma once
// Growth fitting: how a cost grows with the sequence length T.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::bench {

/// The least-squares slope of log(y) against log(x) over the (x, y) points
/// with both positive: 1 is linear growth, 2 quadratic. Empty with fewer
/// than two such points or a single distinct x.
std::optional<double> growth(const std::vector<std::pair<double, double>>& points);

/// "T^1.98", or "n/a" for an empty slope.
std::string slope_text(std::optional<double> slope);

}  // namespace attncheck::bench
