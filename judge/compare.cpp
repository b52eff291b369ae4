#include "attncheck/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace attncheck {

std::string ElementCheck::describe() const {
  return fmt::format("{}[{}] expected {} got {} error {:.3g} tolerance {:.3g} "
                     "budget used {:.3g}",
                     array, fmt::join(index, ","), expected, got, error,
                     tolerance, budget_used);
}

std::vector<int64_t> unflatten(size_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    const auto dim = static_cast<size_t>(shape[k]);
    index[k] = static_cast<int64_t>(flat % dim);
    flat /= dim;
  }
  return index;
}

void Comparison::add_element(ElementCheck e) {
  ++checked;
  const bool equal = e.got == e.expected;  // covers -inf = -inf, +0 = -0
  if (equal) {
    e.error = 0;
    e.budget_used = 0;
  } else {
    e.error = std::isnan(e.got) || std::isnan(e.expected)
                  ? std::numeric_limits<double>::infinity()
                  : std::fabs(e.got - e.expected);
    e.budget_used = e.tolerance > 0 ? e.error / e.tolerance
                                    : std::numeric_limits<double>::infinity();
  }
  const bool pass = equal || e.error <= e.tolerance;
  if (checked == 1 || e.budget_used > worst.budget_used) worst = e;
  max_budget_used = std::max(max_budget_used, e.budget_used);
  if (pass) return;
  ++failed;
  failures.push_back(std::move(e));
  std::stable_sort(failures.begin(), failures.end(),
                   [](const ElementCheck& x, const ElementCheck& y) {
                     return x.budget_used > y.budget_used;
                   });
  if (failures.size() > kMaxListed) failures.pop_back();
}

void Comparison::add(const std::string& array, const std::vector<int64_t>& shape,
                     const std::vector<double>& got,
                     const std::vector<double>& expected,
                     const std::vector<double>& tol,
                     const std::vector<uint8_t>& skip) {
  for (size_t k = 0; k < expected.size(); ++k) {
    if (!skip.empty() && skip[k]) continue;
    ElementCheck e;
    e.array = array;
    e.index = unflatten(k, shape);
    e.expected = expected[k];
    e.got = k < got.size() ? got[k] : std::numeric_limits<double>::quiet_NaN();
    e.tolerance = tol[k];
    add_element(std::move(e));
  }
}

std::string Comparison::describe_failures() const {
  std::string s;
  for (const ElementCheck& e : failures) s += "  " + e.describe() + "\n";
  if (failed > static_cast<int64_t>(failures.size())) {
    s += fmt::format("  ... and {} more of {} elements checked\n",
                     failed - static_cast<int64_t>(failures.size()), checked);
  }
  return s;
}

}  // namespace attncheck
