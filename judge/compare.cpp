#include "judge/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace attncheck {

std::string ElementCheck::describe() const {
  return fmt::format("{}[{}] expected {}{} got {} error {:.3g} tolerance {:.3g} "
                     "budget used {:.3g}",
                     array, fmt::join(index, ","), expected,
                     radius > 0 ? fmt::format(" +- {:.3g}", radius) : "", got, error,
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
  // Equal to an exact (or correctly rounded) value: covers -inf = -inf,
  // +0 = -0. Against an enclosure equality still leaves the radius.
  const bool equal = e.got == e.expected && e.radius == 0;
  if (equal) {
    e.error = 0;
    e.budget_used = 0;
  } else {
    e.error = std::isnan(e.got) || std::isnan(e.expected)
                  ? std::numeric_limits<double>::infinity()
                  : (e.got == e.expected ? 0.0 : std::fabs(e.got - e.expected)) + e.radius;
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
                     const std::vector<uint8_t>& skip,
                     const std::vector<double>& radius) {
  for (size_t k = 0; k < expected.size(); ++k) {
    if (!skip.empty() && skip[k]) continue;
    const double x = expected[k];
    const double y = k < got.size() ? got[k] : std::numeric_limits<double>::quiet_NaN();
    const double rad = radius.empty() ? 0.0 : radius[k];
    // The common case at real sizes, without building an ElementCheck (its
    // index and name): a passing element that is not the new worst.
    if (!std::isnan(x) && !std::isnan(y) && checked > 0) {
      const double err = (x == y ? 0.0 : std::fabs(y - x)) + rad;
      const double budget = err == 0 ? 0.0
                            : tol[k] > 0 ? err / tol[k]
                                         : std::numeric_limits<double>::infinity();
      if (err <= tol[k] && budget <= worst.budget_used) {
        ++checked;
        continue;
      }
    }
    ElementCheck e;
    e.array = array;
    e.index = unflatten(k, shape);
    e.expected = x;
    e.got = y;
    e.radius = rad;
    e.tolerance = tol[k];
    add_element(std::move(e));
  }
}

std::vector<double> pairwise_tolerance(const std::vector<double>& tol_x,
                                       const std::vector<double>& tol_y) {
  std::vector<double> tol(tol_x.size());
  for (size_t k = 0; k < tol.size(); ++k) tol[k] = pairwise_tolerance(tol_x[k], tol_y[k]);
  return tol;
}

const char* array_name(ArrayKind kind) {
  switch (kind) {
    case ArrayKind::out: return "out";
    case ArrayKind::weights: return "weights";
    case ArrayKind::lse: return "lse";
    case ArrayKind::dq: return "dq";
    case ArrayKind::dk: return "dk";
    case ArrayKind::dv: return "dv";
  }
  return "?";
}

std::vector<int64_t> array_shape(ArrayKind kind, const Problem& p) {
  // Version 2 layouts (SPEC 1.1): packed queries pack out, dq (rows x
  // heads) and lse (heads x rows) and return no weights; packed keys pack
  // dk and dv.
  if (p.packed_q()) {
    switch (kind) {
      case ArrayKind::out: return {p.total_q(), p.heads, p.dv};
      case ArrayKind::weights: return {0};
      case ArrayKind::lse: return {p.heads, p.total_q()};
      case ArrayKind::dq: return {p.total_q(), p.heads, p.dk};
      default: break;
    }
  }
  if (p.packed_k()) {
    const int64_t total_k = p.packed->cu_seqlens_k.back();
    if (kind == ArrayKind::dk) return {total_k, p.kv_heads, p.dk};
    if (kind == ArrayKind::dv) return {total_k, p.kv_heads, p.dv};
  }
  switch (kind) {
    case ArrayKind::out: return {p.batch, p.heads, p.tq, p.dv};
    case ArrayKind::weights: return {p.batch, p.heads, p.tq, p.tk};
    case ArrayKind::lse: return {p.batch, p.heads, p.tq};
    case ArrayKind::dq: return {p.batch, p.heads, p.tq, p.dk};
    case ArrayKind::dk: return {p.batch, p.kv_heads, p.tk, p.dk};
    case ArrayKind::dv: return {p.batch, p.kv_heads, p.tk, p.dv};
  }
  return {};
}

int64_t array_size(ArrayKind kind, const Problem& p) {
  int64_t n = 1;
  for (int64_t d : array_shape(kind, p)) n *= d;
  return n;
}

Features array_feature(ArrayKind kind) {
  switch (kind) {
    case ArrayKind::out: return 0;
    case ArrayKind::weights: return ATTNCHECK_FEATURE_WEIGHTS;
    case ArrayKind::lse: return ATTNCHECK_FEATURE_LSE;
    case ArrayKind::dq:
    case ArrayKind::dk:
    case ArrayKind::dv: return ATTNCHECK_FEATURE_BACKWARD;
  }
  return 0;
}

std::vector<ArrayKind> returned_kinds(const ImplInfo& info, const std::vector<ArrayKind>& kinds) {
  std::vector<ArrayKind> returned;
  for (ArrayKind kind : kinds)
    if (info.has(array_feature(kind))) returned.push_back(kind);
  return returned;
}

void compare_array(Comparison& c, ArrayKind kind, const Problem& p,
                   const std::vector<double>& expected, const std::vector<double>& got,
                   const std::vector<double>& tol, CompareMode mode, std::string_view what,
                   const RowFilter& rows, const std::vector<double>& radius) {
  const std::string name = what.empty() ? std::string(array_name(kind))
                                        : fmt::format("{} ({})", array_name(kind), what);
  std::vector<double> element_tol(expected.size(), 0.0);
  if (mode == CompareMode::tolerance) element_tol = tol;
  if (mode == CompareMode::pairwise) element_tol = pairwise_tolerance(tol, tol);
  std::vector<uint8_t> skip;
  if (rows && p.packed_q() &&
      (kind == ArrayKind::out || kind == ArrayKind::lse || kind == ArrayKind::dq)) {
    // Packed rows: element by element through the layout's index.
    skip.assign(expected.size(), 1);
    const int64_t width = kind == ArrayKind::out ? p.dv : kind == ArrayKind::dq ? p.dk : 1;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.seq_tq(b); ++i) {
          const uint8_t keep = rows(b, h, i) ? 0 : 1;
          if (kind == ArrayKind::lse) {
            skip[row_index(p, b, h, i)] = keep;
            continue;
          }
          const int64_t row = p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i;
          for (int64_t c = 0; c < width; ++c)
            skip[static_cast<size_t>((row * p.heads + h) * width + c)] = keep;
        }
  } else if (rows) {
    // Kinds laid out [b][h][tq][...]: row (b, h, i) is flat index / per_row.
    const auto n_rows = static_cast<size_t>(p.batch * p.heads * p.tq);
    const size_t per_row = expected.size() / n_rows;
    skip.assign(expected.size(), 0);
    for (size_t k = 0; k < expected.size(); ++k) {
      const size_t row = k / per_row;
      const auto i = static_cast<int64_t>(row % static_cast<size_t>(p.tq));
      const auto bh = static_cast<int64_t>(row / static_cast<size_t>(p.tq));
      skip[k] = rows(bh / p.heads, bh % p.heads, i) ? 0 : 1;
    }
  }
  // An enclosure's radius counts only against the oracle (tolerance mode):
  // the other modes compare two answers of implementations.
  c.add(name, array_shape(kind, p), got, expected, element_tol, skip,
        mode == CompareMode::tolerance ? radius : std::vector<double>{});
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
