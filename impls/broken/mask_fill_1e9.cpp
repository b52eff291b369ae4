// An additive mask of -1e9 (scores + mask, the "attention_mask" idiom of
// many model codes) instead of -inf.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// exp(s - 1e9 - m) is exactly 0 for ordinary scores, so the bug hides until
// a masked key's score is itself near 1e9: then s - 1e9 is still large and
// the masked key takes weight, or all of it.
double additive_mask(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                     std::span<double> a) {
  return softmax_masked_by_fill(s, ok, a, [](double x) { return x + -1e9; });
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_mask_fill_1e9, "MaskedWeightsAreZero"),
    [](const Problem& p) { return naive_forward(p, p.scale, true, by_rows(additive_mask)); }));

}  // namespace
}  // namespace attncheck::impls::broken
