// Split-K/V through a kernel without descale arguments: the q and k
// descales are missing from the scores and v_descale from the output on
// rows of more than 256 keys (the unsplit path has them).

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_split_drops_descales", "MatchesOracle",
                                   "paged_online_f32 whose split-K/V path ignores the q, k and v descales",
                                   [] {
                                     PagedOptions b;
                                     b.split_drops_descales = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
