// The f32 reference: the loop kernel in float, forward and backward,
// rejecting empty rows.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "loop_kernel.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    reference_info("loop_f32", DType::f32, kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD,
                   EmptyRowPolicy::error,
                   "per-query loops in float (scale rounded to float), every "
                   "feature and backward; empty rows are an error"),
    [](const Problem& p) { return loop_forward<float>(p, EmptyRowPolicy::error); },
    [](const Problem& p) { return loop_backward<float>(p, EmptyRowPolicy::error); }));

}  // namespace
}  // namespace attncheck::impls
