// A causal mask off by one (j <= p_i + 1, a "<=" where "<" was meant on
// an exclusive bound): every query also sees the next key.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_causal_off_by_one, "CausalPrefixIndependence"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             return allowed_except(p, Constraint::causal, b, h, i, j) &&
                                    (!p.causal || j <= p.position(i) + 1);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
