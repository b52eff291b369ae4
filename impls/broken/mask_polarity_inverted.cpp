// The explicit boolean mask read with the opposite polarity (1 = masked,
// the convention of torch's key_padding_mask and of MultiheadAttention's
// bool attn_mask, where the SDPA convention 1 = allowed was meant).

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Key padding, causal and window are right. A row the inverted mask
// empties gets whatever the softmax of no keys gives (zeros).
ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_mask_polarity_inverted, "MaskedWeightsAreZero"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             return allowed_except(p, Constraint::mask, b, h, i, j) &&
                                    (!p.mask || !p.mask->at(b, h, i, j, p.tq, p.tk));
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
