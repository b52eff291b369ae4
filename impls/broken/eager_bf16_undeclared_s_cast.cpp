// eager_bf16's arithmetic (S stored in bf16 twice, P in bf16) declared as if
// the scores stayed in float: s_cast = accum, the way a plugin author who
// knows about the P cast but not the score storage fills in the descriptor.

#include <memory>

#include "../eager_kernel.h"
#include "attncheck/registry.h"
#include "../impl_common.h"

namespace attncheck::impls::broken {
namespace {

ImplInfo info() {
  ImplInfo i = eager_info("broken_eager_bf16_undeclared_s_cast", DType::bf16,
                          "eager bf16 framework code (S stored in bf16 before softmax) "
                          "declaring its scores in float: logit errors near 2^-8 |s| where "
                          "2^-24 |s| is declared");
  i.kind = Kind::broken;
  i.caught_by = "MatchesOracle";
  i.precision.s_cast = i.precision.accum;
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return eager_forward(p, DType::bf16);
}));

}  // namespace
}  // namespace attncheck::impls::broken
