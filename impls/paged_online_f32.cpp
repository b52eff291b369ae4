// paged_online_f32: the serving kernel of paged_online_kernel.h. What
// serving kernels do (vLLM, FlashInfer): K/V cached in bf16 or E4M3 with
// per-tensor descales, q and the output in bf16 (or f32), everything
// accumulated in float; P is kept in float for P.V (no fp8 P cast); rows
// past 256 keys split into chunks of 256 when the batch's longest
// sequence is past 256 (flash-decoding), the sink joining at the combine.
// Declared honestly: accum f32, p_cast f32, key_block 16 (its fixed block),
// exp_ulps 1 (glibc's expf, tanhf), no flush.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "paged_online_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info(
      "paged_online_f32", DType::bf16, kPagedOnlineFeatures, EmptyRowPolicy::error,
      "serving-style online softmax in float over blocks of 16 keys, split-K/V past 256 keys, "
      "K/V cached in bf16 or E4M3 (paged, packed or dense), sinks and descales; no weights, no "
      "backward; empty rows are an error");
  i.precision = kernel_precision(DType::f32, DType::f32, kPagedKeyBlock);
  i.combos = paged_online_combos();
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return paged_online_forward(p);
}));

}  // namespace
}  // namespace attncheck::impls
