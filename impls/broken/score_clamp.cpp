// Scores clamped to [-30, 30] before the softmax, an overflow guard sized
// for f16's exp left in a kernel whose callers never see the clamp.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr double kClamp = 30;

// Exact while every score lies in [-30, 30]. Adding one vector to every key
// shifts a row's scores by a constant the softmax should ignore, but large
// shifts push them against the clamp and flatten the weights.
double clamped(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
               std::span<double> a) {
  std::vector<double> c(s.begin(), s.end());
  for (double& x : c) x = std::clamp(x, -kClamp, kClamp);
  return stable_softmax(c, ok, a);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_score_clamp", "KeyTranslationInvariance",
                "scores clamped to [-30, 30] before the softmax, so shifted or large scores "
                "saturate"),
    [](const Problem& p) { return naive_forward(p, p.scale, true, by_rows(clamped)); }));

}  // namespace
}  // namespace attncheck::impls::broken
