// Split-K/V whose combine joins the chunks and forgets the sink (the
// chunks leave it to the combine): rows of more than 256 keys with a sink
// are normalised as if there were none.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_split_combine_drops_sink", "MatchesOracle",
                                   "paged_online_f32 whose split-K/V combine forgets the sink",
                                   [] {
                                     PagedOptions b;
                                     b.split_combine_drops_sink = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
