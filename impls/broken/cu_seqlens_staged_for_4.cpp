// cu_seqlens staged into an array for 4 sequences and indexed b % 4: the
// fifth sequence of a packed batch reads and writes as the first. Right
// for batches of at most 4 sequences.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_cu_seqlens_staged_for_4", "PackedEqualsSeparate",
                                   "paged_online_f32 with cu_seqlens staged for 4 sequences (sequence b taken as b % 4)",
                                   [] {
                                     PagedOptions b;
                                     b.cu_seqlens_staged_for_4 = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
