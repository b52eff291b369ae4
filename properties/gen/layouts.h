#pragma once
// Memory layouts of a strided problem (SPEC 1: strides), for the dense
// draw and for properties that compare one problem in several layouts.

#include <array>
#include <cstdint>
#include <vector>

#include "attncheck/problem.h"

namespace attncheck::gen {

/// Memory layouts a strided problem can take.
enum class Layout { contiguous, bthd, padded };

/// The same logical tensor in another layout. Gaps of the padded layout
/// hold NaN, so reading outside the logical tensor shows.
Tensor relayout(const Tensor& t, std::array<int64_t, 4> shape, Layout layout);

/// The problem with q, k and v in `layout`.
Problem with_layout(const Problem& p, Layout layout);

namespace detail {

/// The row-major values `x` of a tensor of `shape` in `layout`. `pad` is
/// the unit of a padded layout's gaps: 1, or 32 for a block format, whose
/// strides stay whole blocks (SPEC 1.2).
Tensor lay_out(const std::vector<double>& x, std::array<int64_t, 4> shape, Layout layout,
               int64_t pad = 1);

}  // namespace detail
}  // namespace attncheck::gen
