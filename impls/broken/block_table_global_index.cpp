// A block table indexed with the key's global index (its sequence's offset
// among all keys plus j) instead of its index inside the sequence: right
// for the first sequence, other pages for the rest.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_block_table_global_index", "PagedEqualsContiguous",
                                   "paged_online_f32 looking keys up in the block table by their "
                                   "global index instead of their index in the sequence",
                                   [] {
                                     PagedOptions b;
                                     b.block_table_global_index = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
