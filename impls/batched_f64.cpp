// The batched reference in double: Eigen matrix products per (b, h),
// forward and backward.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "batched_kernel.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<CountingImpl>(
    reference_info("batched_f64", DType::f64, kBatchedFeatures | ATTNCHECK_FEATURE_BACKWARD,
                   EmptyRowPolicy::error,
                   "Eigen matrix products per (b, h) in double, forward and "
                   "backward; key padding and causal masks only; empty rows "
                   "are an error"),
    [](const Problem& p, int64_t* n) { return batched_forward<double>(p, n); },
    [](const Problem& p) { return batched_backward<double>(p); }));

}  // namespace
}  // namespace attncheck::impls
