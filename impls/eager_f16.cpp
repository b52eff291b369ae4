// f16 attention as eager framework code computes it (PyTorch eager, Hugging
// Face "eager" attention in f16): S = Q K^T and S * scale stored in f16,
// softmax in float from the stored scores, P stored in f16, P V
// accumulated in float and stored in f16.

#include <memory>

#include "attncheck/registry.h"
#include "eager_kernel.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    eager_info("eager_f16", DType::f16,
               "f16 eager framework code: S = Q K^T, then S * scale, each stored in f16, "
               "softmax in float from the stored S, P stored in f16, P.V in float; weights "
               "are P after the rounding; every feature but lse and backward; empty rows are "
               "an error"),
    [](const Problem& p) { return eager_forward(p, DType::f16); }));

}  // namespace
}  // namespace attncheck::impls
