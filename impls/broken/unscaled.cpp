// The missing 1/sqrt(dk): scores are plain dot products.

#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_unscaled, "ScaledScoreVarianceNearOne",
                kLoopFeatures & ~ATTNCHECK_FEATURE_SCALE),
    [](const Problem& p) {
      return naive_forward(p, 1.0, true, correct_softmax());
    }));

}  // namespace
}  // namespace attncheck::impls::broken
