// A multi-head attention layer in float (kind layer): W_q, W_k, W_v, W_o,
// heads split B x H x T x dk, the loop kernel per head. Its forward is that
// core, what the layer computes with identity projections.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "mha_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info() {
  ImplInfo i = reference_info("mha_f32", DType::f32, kLoopFeatures, EmptyRowPolicy::error,
                              "multi-head attention layer in float: projections W_q, W_k, W_v, "
                              "W_o (4 d^2 parameters), heads split B x H x T x dk, the loop "
                              "kernel per head; its forward is that core");
  i.kind = Kind::layer;
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<MhaLayer>(info(), split_heads));

}  // namespace
}  // namespace attncheck::impls
