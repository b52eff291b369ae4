// Online (flash-style) attention in float, forward and recompute-based
// backward: online_f32 with key blocks of 64, online_b4_f32 with blocks of 4
// (so the rescales happen on the harness's small problems too).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "online_kernel.h"

namespace attncheck::impls {
namespace {

std::shared_ptr<const Implementation> make(const std::string& name, int64_t block) {
  ImplInfo info = reference_info(
      name, DType::f32, kOnlineFeatures | ATTNCHECK_FEATURE_BACKWARD, EmptyRowPolicy::error,
      "single-pass online softmax in float over key blocks of " + std::to_string(block) +
          " (running max and sum, rescaled accumulators), every feature but weights; "
          "flash-style backward; empty rows are an error");
  info.precision = kernel_precision(DType::f32, DType::f32, block);
  OnlineOptions o;
  o.key_block = block;
  return std::make_shared<FunctionImpl>(
      std::move(info), [o](const Problem& p) { return online_forward<float>(p, o); },
      [o](const Problem& p) { return online_backward<float>(p, o); });
}

ATTNCHECK_REGISTER_IMPL(make("online_f32", 64));
ATTNCHECK_REGISTER_IMPL(make("online_b4_f32", 4));

}  // namespace
}  // namespace attncheck::impls
