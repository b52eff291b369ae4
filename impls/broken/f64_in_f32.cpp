// Declares f64 with f64 precision traits but computes in float, as a
// binding that silently downcasts its inputs does.

#include <memory>

#include "../loop_kernel.h"
#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// The loop kernel in float: a correct f32 implementation, with errors near
// 2^-24 where the declared traits allow about 2^-53.
ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_f64_in_f32, "MatchesOracle"),
    [](const Problem& p) { return loop_forward<float>(p, EmptyRowPolicy::error); }));

}  // namespace
}  // namespace attncheck::impls::broken
