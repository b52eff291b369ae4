// The f64 reference: the loop kernel in double, forward and backward,
// rejecting empty rows.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "loop_kernel.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    reference_info("loop_f64", DType::f64, kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD,
                   EmptyRowPolicy::error,
                   "per-query loops in double, every feature and backward; "
                   "empty rows are an error"),
    [](const Problem& p) { return loop_forward<double>(p, EmptyRowPolicy::error); },
    [](const Problem& p) { return loop_backward<double>(p, EmptyRowPolicy::error); }));

}  // namespace
}  // namespace attncheck::impls
