// The mask applied after the softmax: weights normalised over every key,
// then the disallowed ones zeroed without renormalising.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Rows with a masked key sum to less than one, so the output is pulled
// towards 0 and leaves the convex hull of the allowed values. lse is the
// one over all keys.
double mask_afterwards(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                       std::span<double> a) {
  const std::vector<uint8_t> all(s.size(), 1);
  const double lse = stable_softmax(s, all, a);
  for (size_t j = 0; j < s.size(); ++j)
    if (!ok[j]) a[j] = 0;
  return lse;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_mask_after_softmax", "OutputInConvexHull",
                "softmax over all keys, then masked weights zeroed without renormalising, so "
                "masked rows sum to less than 1"),
    [](const Problem& p) { return naive_forward(p, p.scale, true, by_rows(mask_afterwards)); }));

}  // namespace
}  // namespace attncheck::impls::broken
