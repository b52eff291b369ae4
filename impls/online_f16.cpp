// Online (flash-style) attention for f16 inputs and outputs, the way f16
// flash kernels run: scores, softmax and sums in float, each P element
// rounded to f16 before it multiplies V, the output rounded to f16. Key
// blocks of 4, so its rescales happen on the harness's small problems.

#include <memory>
#include <utility>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "online_kernel.h"

namespace attncheck::impls {
namespace {

constexpr int64_t kBlock = 4;

std::shared_ptr<const Implementation> make() {
  ImplInfo info = reference_info(
      "online_f16", DType::f16, kOnlineFeatures, EmptyRowPolicy::error,
      "f16 in and out, single-pass online softmax in float over key blocks of 4, P rounded "
      "to f16 before P.V; every feature but weights; empty rows are an error");
  info.precision = kernel_precision(DType::f32, DType::f16, kBlock);
  OnlineOptions o;
  o.key_block = kBlock;
  o.p_cast = DType::f16;
  return std::make_shared<FunctionImpl>(
      std::move(info), [o](const Problem& p) { return online_forward<float>(p, o); });
}

ATTNCHECK_REGISTER_IMPL(make());

}  // namespace
}  // namespace attncheck::impls
