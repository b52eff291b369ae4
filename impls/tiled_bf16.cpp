// The tiled kernel for bf16 inputs and outputs, as mixed-precision kernels
// run it: products, softmax and sums in float, P rounded to bf16 before
// P V (the row sum keeps it unrounded), the output rounded to bf16
// (tiled_kernel.h).

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "tiled_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info(
      "tiled_bf16", DType::bf16, kOnlineFeatures, EmptyRowPolicy::error,
      "bf16 in and out: tiled_f32's tiles, online softmax and split-K/V in float, P rounded "
      "to bf16 before P.V; every feature but weights; no backward; empty rows are an error");
  i.precision = kernel_precision(DType::f32, DType::bf16, kTiledKeys);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  TiledOptions o;
  o.p_cast = DType::bf16;
  return tiled_forward(p, o);
}));

}  // namespace
}  // namespace attncheck::impls
