// Split-K/V that reads max_seqlen_k keys (the batch's longest) for every
// sequence of a packed or paged batch: a shorter sequence beside one past
// 256 keys attends the next sequence's keys (or zeros past the end).

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_split_reads_max_seqlen_k", "MatchesOracle",
                                   "paged_online_f32 whose split-K/V path reads max_seqlen_k keys for every sequence",
                                   [] {
                                     PagedOptions b;
                                     b.split_reads_max_seqlen_k = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
