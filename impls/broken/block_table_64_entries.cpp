// A sequence's block table read into a fixed array of 64 entries (a kernel
// that stages the table in shared memory sized for its tuning shapes):
// keys on page 65 and later read as 0. Right for every sequence of at most
// 64 pages, so the small problems (at most 19 keys, in pages of 1 or more)
// never see it; a real-size paged cache (a sequence of 1025 keys in pages
// of 16) does.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_block_table_64_entries", "PagedEqualsContiguous",
                                   "paged_online_f32 reading at most 64 block table entries per "
                                   "sequence (keys on later pages read as 0)",
                                   [] {
                                     PagedOptions b;
                                     b.table_entries = 64;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
