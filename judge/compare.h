#pragma once
// The one comparison object: element-wise |got - expected| <= tolerance,
// with the budget used (error / tolerance) of every element; and the
// comparison of an implementation's arrays by kind (out, weights, lse, dq,
// dk, dv), which knows their shapes and which implementations return them.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck {

/// One compared element.
struct ElementCheck {
  std::string array;             ///< "out", "weights", "lse", ...
  std::vector<int64_t> index;    ///< [b, h, i, d] or [b, h, i]
  double expected = 0, got = 0;
  double error = 0;              ///< |got - expected| + radius (inf for NaN)
  double tolerance = 0;
  double budget_used = 0;        ///< error / tolerance (inf past an exact 0)
  /// The exact value lies within expected +- radius (an enclosure, SPEC 4);
  /// 0 when expected is exact or correctly rounded. Last, so that the
  /// aggregate initialisations of the fields above stay as they were.
  double radius = 0;

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
  /// `radius` (may be empty): expected is an enclosure's midpoint, the
  /// exact value within radius[k] of it; the error charged is then
  /// max(|got - lo|, |got - hi|) = |got - expected| + radius[k].
  void add(const std::string& array, const std::vector<int64_t>& shape,
           const std::vector<double>& got, const std::vector<double>& expected,
           const std::vector<double>& tol, const std::vector<uint8_t>& skip = {},
           const std::vector<double>& radius = {});

  /// One element, for properties that compare derived values.
  void add_element(ElementCheck e);

  /// One line per offending element, worst first.
  std::string describe_failures() const;
};

/// Splits a flat index into one per dimension of `shape`.
std::vector<int64_t> unflatten(size_t flat, const std::vector<int64_t>& shape);

/// The tolerance between two answers to one exact value e, each within its
/// own tolerance of e: |x - y| <= |x - e| + |e - y| <= tol_x + tol_y (the
/// triangle inequality). Two answers judged with the same tolerance tol are
/// within 2 tol of each other.
inline double pairwise_tolerance(double tol_x, double tol_y) { return tol_x + tol_y; }

/// pairwise_tolerance of each element of two arrays of one shape.
std::vector<double> pairwise_tolerance(const std::vector<double>& tol_x,
                                       const std::vector<double>& tol_y);

/// The arrays an implementation returns (SPEC section 1), by kind: the
/// forward pass's out, weights and lse, the backward pass's dq, dk and dv.
enum class ArrayKind { out, weights, lse, dq, dk, dv };

/// The forward pass's kinds, in the order comparisons list them.
inline const std::vector<ArrayKind> kForwardKinds{ArrayKind::out, ArrayKind::weights,
                                                  ArrayKind::lse};
/// The backward pass's kinds, in the order comparisons list them.
inline const std::vector<ArrayKind> kBackwardKinds{ArrayKind::dq, ArrayKind::dk, ArrayKind::dv};

/// "out", "weights", "lse", "dq", "dk" or "dv".
const char* array_name(ArrayKind kind);

/// The shape of the kind's array for p: out [b][h][tq][dv], weights
/// [b][h][tq][tk], lse [b][h][tq], dq [b][h][tq][dk], dk [b][kv_h][tk][dk],
/// dv [b][kv_h][tk][dv]. Version 2 (SPEC 1.1): with packed queries out
/// [total_q][h][dv], lse [h][total_q], dq [total_q][h][dk] and no weights
/// ({0}); with packed keys dk [total_k][kv_h][dk], dv [total_k][kv_h][dv];
/// paged problems keep the dense shapes (tq, tk the longest sequence).
std::vector<int64_t> array_shape(ArrayKind kind, const Problem& p);

/// The number of elements of the kind's array for p.
int64_t array_size(ArrayKind kind, const Problem& p);

/// The feature an implementation declares when it returns the kind (0 for
/// out, which every implementation returns).
Features array_feature(ArrayKind kind);

/// Those of `kinds` that an implementation declaring `info` returns.
std::vector<ArrayKind> returned_kinds(const ImplInfo& info, const std::vector<ArrayKind>& kinds);

/// The kind's array of a result (ForwardResult, BackwardResult,
/// OracleResult, Tolerances, GradTolerances...): its member of that name,
/// or an empty array when it has none.
template <typename Result>
const std::vector<double>& array_of(const Result& r, ArrayKind kind) {
  static const std::vector<double> kNone;
  switch (kind) {
    case ArrayKind::out:
      if constexpr (requires { r.out; }) return r.out;
      break;
    case ArrayKind::weights:
      if constexpr (requires { r.weights; }) return r.weights;
      break;
    case ArrayKind::lse:
      if constexpr (requires { r.lse; }) return r.lse;
      break;
    case ArrayKind::dq:
      if constexpr (requires { r.dq; }) return r.dq;
      break;
    case ArrayKind::dk:
      if constexpr (requires { r.dk; }) return r.dk;
      break;
    case ArrayKind::dv:
      if constexpr (requires { r.dv; }) return r.dv;
      break;
  }
  return kNone;
}

/// How compare_array judges got against expected.
enum class CompareMode {
  /// Within the given tolerance: expected is exact (the oracle's), or the
  /// tolerance already covers both sides.
  tolerance,
  /// Both are answers to the same problem, each within the given tolerance
  /// of the exact value: within pairwise_tolerance(tol, tol) of each other.
  pairwise,
  /// Bitwise equal (as values: +0 equals -0, NaN never equals); the
  /// tolerance is not read.
  bitwise,
};

/// Selects the rows (b, h, i) a comparison covers.
using RowFilter = std::function<bool(int64_t b, int64_t h, int64_t i)>;

/// Adds the kind's array of p to `c`, named "NAME (what)" (or "NAME" for an
/// empty `what`), with the kind's shape for the printed index. `rows`, when
/// given, restricts the comparison to the selected rows of a kind laid out
/// [b][h][tq][...] (out, weights, lse, dq), or packed like q (out, lse, dq
/// of a problem with packed queries).
void compare_array(Comparison& c, ArrayKind kind, const Problem& p,
                   const std::vector<double>& expected, const std::vector<double>& got,
                   const std::vector<double>& tol, CompareMode mode, std::string_view what = {},
                   const RowFilter& rows = {}, const std::vector<double>& radius = {});

/// The enclosure radii of an oracle result's kind (empty for the certified
/// oracle, and for anything that is not an oracle result).
template <typename Result>
const std::vector<double>& radius_of(const Result& r, ArrayKind kind) {
  static const std::vector<double> kNone;
  if constexpr (requires { r.out_radius; }) {
    if (kind == ArrayKind::out) return r.out_radius;
    if (kind == ArrayKind::weights) return r.weights_radius;
    if (kind == ArrayKind::lse) return r.lse_radius;
  }
  return kNone;
}

/// compare_array for each of `kinds`, the arrays taken from whole results
/// (array_of): the oneDNN benchdnn way, one call for every kind an
/// implementation returns.
template <typename Expected, typename Got, typename Tol>
void compare_kinds(Comparison& c, const std::vector<ArrayKind>& kinds, const Problem& p,
                   const Expected& expected, const Got& got, const Tol& tol, CompareMode mode,
                   std::string_view what = {}) {
  for (ArrayKind kind : kinds) {
    compare_array(c, kind, p, array_of(expected, kind), array_of(got, kind), array_of(tol, kind),
                  mode, what, {}, radius_of(expected, kind));
  }
}

}  // namespace attncheck
