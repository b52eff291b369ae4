// A GQA backward pass that takes dK and dV from the first query head of each
// group only, instead of summing over the group's heads (as a kernel that
// writes instead of accumulates would). The forward pass and dQ are
// loop_f64's, correct.

#include <algorithm>
#include <memory>

#include "../loop_kernel.h"
#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// A head with dO = 0 has dS = 0 and adds nothing to dK or dV, so the
// backward of the problem with the other heads' dO zeroed gives exactly the
// first heads' contributions.
BackwardResult first_head_of_group(const Problem& p) {
  BackwardResult r = loop_backward<double>(p, EmptyRowPolicy::error);
  if (r.status != Status::ok) return r;
  Problem first = p;
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      if (h % group != 0) {
        const auto at = first.dout.begin() + static_cast<std::ptrdiff_t>(out_index(p, b, h, 0, 0));
        std::fill(at, at + p.tq * p.dv, 0.0);
      }
  BackwardResult f = loop_backward<double>(first, EmptyRowPolicy::error);
  r.dk = std::move(f.dk);
  r.dv = std::move(f.dv);
  return r;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_backward_gqa_no_group_sum", "GradientsMatchOracle",
                "GQA backward: dK and dV from the first query head of each "
                "group instead of the group's sum; forward correct",
                kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD),
    [](const Problem& p) { return loop_forward<double>(p, EmptyRowPolicy::error); },
    first_head_of_group));

}  // namespace
}  // namespace attncheck::impls::broken
