// The batched reference in float: Eigen matrix products per (b, h),
// forward and backward.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "batched_kernel.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<CountingImpl>(
    reference_info("batched_f32", DType::f32, kBatchedFeatures | ATTNCHECK_FEATURE_BACKWARD,
                   EmptyRowPolicy::error,
                   "Eigen matrix products per (b, h) in float, forward and "
                   "backward; key padding and causal masks, GQA; empty rows "
                   "are an error"),
    [](const Problem& p, int64_t* n) { return batched_forward<float>(p, n); },
    [](const Problem& p) { return batched_backward<float>(p); }));

}  // namespace
}  // namespace attncheck::impls
