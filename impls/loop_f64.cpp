// The f64 reference: the loop kernel in double, forward and backward,
// rejecting empty rows. Every serving feature (SPEC 1.1): sinks (with
// d sink in the backward), packed sequences, paged K/V (forward only) and
// descaled inputs in any narrower format, which double holds exactly.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "loop_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info("loop_f64", DType::f64,
                              kLoopFeatures | kServingFeatures | ATTNCHECK_FEATURE_BACKWARD,
                              EmptyRowPolicy::error,
                              "per-query loops in double, every feature (sinks, packed, paged, "
                              "descaled fp8 inputs) and backward; empty rows are an error");
  // Inputs in any format convert to double exactly; the output is f64.
  i.combos = {{DType::f64, DType::f64, DType::f64},
              {DType::bf16, DType::bf16, DType::f64},
              {DType::e4m3, DType::e4m3, DType::f64},
              {DType::e5m2, DType::e5m2, DType::f64},
              {DType::bf16, DType::e4m3, DType::f64}};
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    info(), [](const Problem& p) { return loop_forward<double>(p, EmptyRowPolicy::error); },
    [](const Problem& p) { return loop_backward<double>(p, EmptyRowPolicy::error); }));

}  // namespace
}  // namespace attncheck::impls
