// Key padding inferred from the data: keys whose value row is all zero are
// taken for padding and masked, as code that detects padding by zero
// vectors does.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Exact while no value row is zero. A zero row loses its weight and the
// others are renormalised; a linear combination of value sets makes or
// removes zero rows, so the output is not linear in V.
ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_zero_values_as_padding", "ValueLinearity",
                "keys whose value row is all zero are treated as padding and masked"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             bool nonzero = false;
                             for (int64_t d = 0; d < p.dv; ++d)
                               nonzero = nonzero || p.v.at(b, p.kv_head(h), j, d) != 0;
                             return nonzero && p.allowed(b, h, i, j);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
