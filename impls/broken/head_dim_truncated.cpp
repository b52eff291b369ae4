// A kernel specialised for head dims up to 128 that takes a wider head
// without complaint and runs its q.k loop to its compiled maximum: for
// dk > 128 only the first 128 components of q.k count (the scale is still
// 1/sqrt(dk)). Right for every dk <= 128.

#include <algorithm>
#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kMaxHeadDim = 128;

ForwardResult truncated(const Problem& p) {
  if (p.dk <= kMaxHeadDim) return naive_forward(p, p.scale, true, correct_softmax());
  const Problem loaded = with_loaded_qk(
      p, kMaxHeadDim, [](const Tensor& x, int64_t a, int64_t c, int64_t r, int64_t, int64_t,
                         int64_t t) { return x.at(a, c, r, t); });
  return naive_forward(loaded, p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_head_dim_truncated", "MatchesOracle",
                "head dims above 128 silently truncated: q.k sums only the first 128 "
                "components"),
    truncated));

}  // namespace
}  // namespace attncheck::impls::broken
