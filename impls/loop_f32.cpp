// The f32 reference: the loop kernel in float, forward and backward,
// rejecting empty rows. Every serving feature (SPEC 1.1): sinks, packed
// sequences, paged K/V (forward only) and descaled inputs, bf16 and fp8
// values decoded into float exactly; with a bf16 output the float result
// is rounded once at the end.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "loop_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info("loop_f32", DType::f32,
                              kLoopFeatures | kServingFeatures | ATTNCHECK_FEATURE_BACKWARD,
                              EmptyRowPolicy::error,
                              "per-query loops in float (scale rounded to float), every feature "
                              "(sinks, packed, paged, descaled fp8 inputs) and backward; empty "
                              "rows are an error");
  // paged_online_f32's f32 combinations (a bf16 or E4M3 K/V cache), and
  // the mixed serving ones: bf16 q with E4M3 K/V and a bf16 output,
  // E4M3 everything with a bf16 output (or f32).
  i.combos = {{DType::f32, DType::f32, DType::f32},    {DType::f32, DType::bf16, DType::f32},
              {DType::f32, DType::e4m3, DType::f32},   {DType::e4m3, DType::e4m3, DType::f32},
              {DType::bf16, DType::e4m3, DType::bf16}, {DType::e4m3, DType::e4m3, DType::bf16}};
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    info(), [](const Problem& p) { return loop_forward<float>(p, EmptyRowPolicy::error); },
    [](const Problem& p) { return loop_backward<float>(p, EmptyRowPolicy::error); }));

}  // namespace
}  // namespace attncheck::impls
