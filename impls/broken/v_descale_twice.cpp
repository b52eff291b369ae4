// The V descale applied twice (once when V is dequantised, once more on the
// output), so outputs are off by a factor v_descale.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_v_descale_twice", "DescaleEquivalence",
                                   "paged_online_f32 multiplying the output by v_descale twice",
                                   [] {
                                     PagedOptions b;
                                     b.v_descale_times = 2;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
