// The V descale never applied: outputs are in the units of the stored
// values, off by a factor 1 / v_descale.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_v_descale_ignored", "DescaleEquivalence",
                                   "paged_online_f32 that never multiplies by v_descale", [] {
                                     PagedOptions b;
                                     b.v_descale_times = 0;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
