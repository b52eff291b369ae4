// The sink's share of the running sum dropped at the first rescale: a
// later 16-key block with a larger max restarts the sum from the keys'
// part. Rows of 16 keys or fewer (the CI profile's small problems stop at
// 9) never rescale and are right.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_sink_lost_on_rescale", "MatchesOracle",
                                   "paged_online_f32 that drops the sink from its running sum when a later 16-key block raises the max",
                                   [] {
                                     PagedOptions b;
                                     b.sink_lost_on_rescale = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
