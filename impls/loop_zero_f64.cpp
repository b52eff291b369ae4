// The f64 reference with the other empty-row policy, so EmptyRowsAreRejected
// is shown to accept both.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "loop_kernel.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    reference_info("loop_zero_f64", DType::f64, kLoopFeatures,
                   EmptyRowPolicy::zero,
                   "per-query loops in double, every feature; empty rows give "
                   "zero output and weights, lse = -inf"),
    [](const Problem& p) {
      return loop_forward<double>(p, EmptyRowPolicy::zero);
    }));

}  // namespace
}  // namespace attncheck::impls
