#pragma once
// The one comparison object: element-wise |got - expected| <= tolerance,
// with the budget used (error / tolerance) of every element.

#include <cstdint>
#include <string>
#include <vector>

namespace attncheck {

/// One compared element.
struct ElementCheck {
  std::string array;             ///< "out", "weights", "lse", ...
  std::vector<int64_t> index;    ///< [b, h, i, d] or [b, h, i]
  double expected = 0, got = 0;
  double error = 0;              ///< |got - expected| (inf for NaN)
  double tolerance = 0;
  double budget_used = 0;        ///< error / tolerance (inf past an exact 0)

  /// "out[0,1,2,0] expected 1.5 got 1.25 error 0.25 tolerance 1e-15 budget used 2.5e+14"
  std::string describe() const;
};

/// Result of comparing one or more arrays.
struct Comparison {
  int64_t checked = 0;
  int64_t failed = 0;
  double max_budget_used = 0;
  ElementCheck worst;                 ///< the element with the largest budget
  std::vector<ElementCheck> failures; ///< worst first, at most kMaxListed

  static constexpr size_t kMaxListed = 8;
  bool ok() const { return failed == 0; }

  /// Compares got[k] with expected[k] within tol[k] for every k with
  /// skip[k] == 0 (skip may be empty). `shape` gives the array's dims, for
  /// the printed index. Exactly equal values always pass (so -inf = -inf and
  /// exact zeros with a zero tolerance); NaN never does.
  void add(const std::string& array, const std::vector<int64_t>& shape,
           const std::vector<double>& got, const std::vector<double>& expected,
           const std::vector<double>& tol, const std::vector<uint8_t>& skip = {});

  /// One element, for properties that compare derived values.
  void add_element(ElementCheck e);

  /// One line per offending element, worst first.
  std::string describe_failures() const;
};

/// Splits a flat index into one per dimension of `shape`.
std::vector<int64_t> unflatten(size_t flat, const std::vector<int64_t>& shape);

}  // namespace attncheck
