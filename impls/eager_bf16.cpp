// bf16 attention as eager framework code computes it (PyTorch eager, Hugging
// Face "eager" attention in bf16): S = Q K^T and S * scale stored in bf16,
// softmax in float from the stored scores, P stored in bf16, P V
// accumulated in float and stored in bf16.

#include <memory>

#include "attncheck/registry.h"
#include "eager_kernel.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    eager_info("eager_bf16", DType::bf16,
               "bf16 eager framework code: S = Q K^T, then S * scale, each stored in bf16, "
               "softmax in float from the stored S, P stored in bf16, P.V in float; weights "
               "are P after the rounding; every feature but lse and backward; empty rows are "
               "an error"),
    [](const Problem& p) { return eager_forward(p, DType::bf16); }));

}  // namespace
}  // namespace attncheck::impls
