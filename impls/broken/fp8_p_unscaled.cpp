// P cast to E4M3 for the P.V product without the scale that keeps weights
// out of its subnormal range (E4M3's smallest normal is 2^-6, so weights
// below it keep 3 bits or fewer, and below 2^-10 vanish), and declared as
// not cast (p_cast f32).

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(
    paged_twin("broken_fp8_p_unscaled", "MatchesOracle",
               "paged_online_f32 rounding P to E4M3 before P.V without a scale, "
               "declared p_cast f32",
               [] {
                 PagedOptions b;
                 b.p_cast = DType::e4m3;
                 return b;
               }()));

}  // namespace
}  // namespace attncheck::impls::broken
