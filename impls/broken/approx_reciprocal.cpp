// The normalisation multiplies by an approximate reciprocal of the sum (as
// rcpps, 12 bits, does in fast f32 kernels) without a Newton step, so
// weights sum to slightly more than one.

#include <cmath>
#include <limits>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// 1/l with the largest error rcpps allows on the high side, 1.5 * 2^-12.
double approx_reciprocal(double l) { return (1 / l) * (1 + 1.5 * 0x1p-12); }

double approx_softmax(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                      std::span<double> a) {
  const double m = allowed_max(s, ok);
  const double l = exp_and_sum(s, ok, m, a);
  const double r = approx_reciprocal(l);
  for (size_t j = 0; j < s.size(); ++j)
    if (ok[j]) a[j] *= r;
  return m + std::log(l);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_approx_reciprocal", "OutputInConvexHull",
                "normalises with an approximate 12-bit reciprocal of the sum (rcpps without a "
                "Newton step): outputs overshoot the values by up to 2^-11"),
    [](const Problem& p) { return naive_forward(p, p.scale, true, by_rows(approx_softmax)); }));

}  // namespace
}  // namespace attncheck::impls::broken
