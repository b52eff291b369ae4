// Masking with a finite fill value instead of -inf, as kernels that use a
// "large negative" constant sized for one dtype do.

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

// Masked keys get score -20, hence weight ~exp(-20 - m): small but nonzero,
// included in the output and returned.
double finite_fill(std::span<const double> s, std::span<const uint8_t> ok,
                   int64_t, std::span<double> a) {
  return softmax_masked_by_fill(s, ok, a, [](double) { return -20.0; });
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_finite_mask_fill, "MaskedWeightsAreZero"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, by_rows(finite_fill));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
