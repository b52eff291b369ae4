// Declares the zero policy but masks with a finite fill -1e9, the common
// "masked_fill(-1e9)" idiom.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Non-empty rows are right (exp(-1e9 - m) is 0), but a fully masked row has
// all scores equal: uniform weights and the mean of the values.
double masked_minus_1e9(std::span<const double> s, std::span<const uint8_t> ok,
                        int64_t, std::span<double> a) {
  return softmax_masked_by_fill(s, ok, a, [](double) { return -1e9; });
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_empty_row_uniform, "EmptyRowsAreRejected", kLoopFeatures,
                EmptyRowPolicy::zero),
    [](const Problem& p) {
      return naive_forward(p, p.scale, false, by_rows(masked_minus_1e9));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
