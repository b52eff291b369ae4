// "Softmax plus one": an implicit extra zero logit in the denominator, as
// proposed for attention sinks, shipped where plain softmax was meant.

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

// The sum gains exp(0 - m), so weights sum to less than one and constant
// values come out shrunk.
double extra_logit(std::span<const double> s, std::span<const uint8_t> ok,
                   int64_t, std::span<double> a) {
  const double m = allowed_max(s, ok);
  const double l = exp_and_sum(s, ok, m, a, std::exp(-m));
  normalise(ok, l, a);
  return m + std::log(l);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(
        "broken_extra_logit", "ConstantValuesReproduced",
        "softmax plus one: an extra exp(0 - m) term in the denominator, "
        "so weights sum to less than 1"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, by_rows(extra_logit));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
