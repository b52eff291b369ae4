// Slots past seqlens_k read: every slot of a sequence's last page is
// attended, so whatever a page holds past tk_b (a stale tail of an
// earlier sequence) enters the softmax.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_paged_stale_tail", "PagedEqualsContiguous",
                                   "paged_online_f32 attending every slot of the last page, past "
                                   "seqlens_k (the stale tail)",
                                   [] {
                                     PagedOptions b;
                                     b.read_page_tail = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
