// Causal block skipping decided with the top-left criterion whatever the
// alignment: a whole 64-key block is skipped for query i when its first key
// is past i, while the mask inside the visited blocks is the right
// (bottom-right) one. Under bottom-right alignment with tq < tk a query sees
// keys up to i + tk - tq, so a block starting in (i, i + tk - tq] is lost:
// every row loses keys once tk - tq >= 64, rows near a block's end already
// for smaller offsets. Either way it takes tk > 64 (a second block):
// with at most 64 keys block 0, never skipped, is the whole row.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kBlock = 64;

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_causal_skip_top_left", "MatchesOracle",
                "causal 64-key block skipping with the top-left criterion (block start > i) "
                "under bottom-right alignment: queries lose visible keys when tk > tq"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             const bool skipped = p.causal && j / kBlock * kBlock > i;
                             return !skipped && p.allowed(b, h, i, j);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
