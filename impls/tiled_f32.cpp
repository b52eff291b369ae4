// The tiled kernel in float: 64-query x 128-key tiles with an online
// softmax whose rescales are exact, split-K/V for decode (tiled_kernel.h).

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "tiled_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info(
      "tiled_f32", DType::f32, kOnlineFeatures, EmptyRowPolicy::error,
      "as attention kernels run at size, in float: 64-query x 128-key tiles, online softmax "
      "with power-of-two rescales, split-K/V over 512-key chunks for decode (tq <= 4, "
      "tk > 512); every feature but weights; no backward; empty rows are an error");
  i.precision = kernel_precision(DType::f32, DType::f32, kTiledKeys);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    info(), [](const Problem& p) { return tiled_forward(p, TiledOptions{}); }));

}  // namespace
}  // namespace attncheck::impls
