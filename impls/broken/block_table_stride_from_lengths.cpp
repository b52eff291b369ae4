// The block table's row stride recomputed from the lengths (the longest
// seqlens_k over page_size) instead of block_table_stride: right only for
// a table exactly as wide as this batch needs; serving tables are sized
// for the model's longest sequence.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_block_table_stride_from_lengths", "PagedEqualsContiguous",
                                   "paged_online_f32 taking the block table's row stride from the lengths, not block_table_stride",
                                   [] {
                                     PagedOptions b;
                                     b.block_table_stride_from_lengths = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
