// E4M3 K/V decoded as E5M2: the same bytes read with 5 exponent bits and 2
// mantissa bits (values of 384 and more become infinities or NaN).

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_e4m3_as_e5m2", "MatchesOracle",
                                   "paged_online_f32 decoding its E4M3 K/V cache as E5M2",
                                   [] {
                                     PagedOptions b;
                                     b.e4m3_as_e5m2 = true;
                                     return b;
                                   }(),
                                   {{DType::bf16, DType::e4m3, DType::bf16},
                                    {DType::f32, DType::e4m3, DType::f32}}));

}  // namespace
}  // namespace attncheck::impls::broken
