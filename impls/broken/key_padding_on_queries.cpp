// Key padding applied on the query axis: key_valid[b][i] masks query row i
// (a broadcast over the wrong dimension) and the keys are not padded.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Padded keys take weight; queries i < tk whose index is "padded" lose
// every key and come out as zero rows. Queries i >= tk have no padding
// entry and see every key.
ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_key_padding_on_queries, "MatchesOracle"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             return allowed_except(p, Constraint::key_valid, b, h, i, j) &&
                                    (p.key_valid.empty() || i >= p.tk ||
                                     p.key_valid[static_cast<size_t>(b * p.tk + i)] != 0);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
