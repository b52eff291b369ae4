// Split-K/V with every chunk starting from the sink, as the unsplit
// row's first block does: the combine then counts the sink once per chunk
// (two or more past 256 keys). Only rows of more than 256 keys with a sink
// show it; the small problems stop at 19 keys.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_split_sink_per_chunk", "MatchesOracle",
                                   "paged_online_f32 whose split-K/V chunks each start from the sink (counted once per chunk)",
                                   [] {
                                     PagedOptions b;
                                     b.split_sink_per_chunk = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
