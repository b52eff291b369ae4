// Scaling by 1/dk instead of 1/sqrt(dk), a slip between the two
// normalisations.

#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_scale_over_dk, "ScaledScoreVarianceNearOne",
                kLoopFeatures & ~ATTNCHECK_FEATURE_SCALE),
    [](const Problem& p) {
      return naive_forward(p, 1.0 / static_cast<double>(p.dk), true,
                           correct_softmax());
    }));

}  // namespace
}  // namespace attncheck::impls::broken
