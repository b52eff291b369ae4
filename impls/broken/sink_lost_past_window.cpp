// The sink folded into key block 0's state (the first block's max and sum
// start from it), and a sliding window that lets the kernel skip that
// block: a row whose band starts at key 16 or later never meets the sink.
// Rows whose window reaches key 0's block, and every row without a
// window, are right; the real-size covering set draws a window that skips
// block 0 with a sink (issue 51).

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_sink_lost_past_window", "MatchesOracle",
                                   "paged_online_f32 that adds the sink in key block 0's state, "
                                   "so rows whose window skips that block lose their sink",
                                   [] {
                                     PagedOptions b;
                                     b.sink_in_block0 = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
