// cu_seqlens read off by one: sequence b's packed rows start at
// cu_seqlens[b + 1] (masked loads read 0 past the last row), so each
// sequence attends with the next sequence's queries and keys.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_cu_seqlens_off_by_one", "PackedEqualsSeparate",
                                   "paged_online_f32 reading sequence b of packed q and k/v from "
                                   "cu_seqlens[b + 1], rows past the end as 0",
                                   [] {
                                     PagedOptions b;
                                     b.cu_seqlens_off_by_one = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
