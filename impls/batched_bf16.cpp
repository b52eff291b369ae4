// The batched kernel for bf16 inputs and outputs, as mixed-precision
// framework kernels run it: Eigen products and the softmax in float, P
// rounded to bf16 before P.V, the output rounded to bf16.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "batched_kernel.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info("batched_bf16", DType::bf16, kBatchedFeatures, EmptyRowPolicy::error,
                              "bf16 in and out: Eigen matrix products per (b, h) in float, "
                              "P rounded to bf16 before P.V; key padding and causal masks, "
                              "GQA; weights are P before the rounding; empty rows are an error");
  i.precision = kernel_precision(DType::f32, DType::bf16, 0);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<CountingImpl>(info(), [](const Problem& p, int64_t* n) {
  return batched_forward_16(p, n);
}));

}  // namespace
}  // namespace attncheck::impls
