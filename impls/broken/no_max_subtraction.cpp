// The textbook softmax exp(s) / sum exp(s), without subtracting the row max
// first, as in kernels that skip the "safe softmax" step.

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Right for moderate scores; a score above the exp-overflow point (709.8 in
// f64) makes exp(s) = inf and the row inf / inf = NaN, and rows whose
// scores all lie below -745 underflow to 0 / 0.
double unshifted(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                 std::span<double> a) {
  // exp(s_j - 0) is exp(s_j): s_j - 0 is exact.
  const double l = exp_and_sum(s, ok, 0.0, a);
  normalise(ok, l, a);
  return std::log(l);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_no_max_subtraction", "ExtremeScoresStayFinite",
                "softmax as exp(s) / sum exp(s) without subtracting the row "
                "max, so scores above 709.8 overflow to inf and NaN"),
    [](const Problem& p) { return naive_forward(p, p.scale, true, by_rows(unshifted)); }));

}  // namespace
}  // namespace attncheck::impls::broken
