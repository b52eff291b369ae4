// Off-by-one in the normalising sum: it starts at the second allowed key.

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

// Rows with two or more allowed keys sum to more than one; a row with one
// key divides by zero, as the shipped loop did.
double skip_first(std::span<const double> s, std::span<const uint8_t> ok,
                  int64_t, std::span<double> a) {
  const double m = allowed_max(s, ok);
  double l = 0;
  bool first = true;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!ok[j]) continue;
    a[j] = std::exp(s[j] - m);
    if (!first) l += a[j];
    first = false;
  }
  normalise(ok, l, a);
  return m + std::log(l);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_sum_skips_first_key", "RowSumsToOne",
                "the softmax denominator skips the first allowed key "
                "(off-by-one), so rows sum to more than 1"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, by_rows(skip_first));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
