// The row max taken over every key, masked ones included (the mask applied
// only to the sum), as in kernels that mask after the max reduction.

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

// A large score at a masked key shifts every exponent: the allowed weights
// round differently, or all underflow and the row becomes 0/0.
double max_over_all(std::span<const double> s, std::span<const uint8_t> ok,
                    int64_t, std::span<double> a) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : s) m = std::max(m, x);
  const double l = exp_and_sum(s, ok, m, a);
  normalise(ok, l, a);
  return m + std::log(l);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_max_over_masked", "MaskedWeightsAreZero",
                "row max taken over all keys including masked ones, so masked "
                "keys change (or underflow) the allowed weights"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, by_rows(max_over_all));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
