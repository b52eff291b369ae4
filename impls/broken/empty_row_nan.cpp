// Declares the error policy but never checks for empty rows.

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

// Disallowed scores are -inf and the max is taken over the row, so a fully
// masked row computes exp(-inf - -inf) = NaN and returns it with Status::ok.
double masked_minus_inf(std::span<const double> s, std::span<const uint8_t> ok,
                        int64_t, std::span<double> a) {
  return softmax_masked_by_fill(s, ok, a, [](double) {
    return -std::numeric_limits<double>::infinity();
  });
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_empty_row_nan, "EmptyRowsAreRejected"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, false, by_rows(masked_minus_inf));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
