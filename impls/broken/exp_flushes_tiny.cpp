// An exp with an early out: results below 2^-100 are returned as 0, as a
// vectorised exp that clamps its argument far above the format's underflow
// does, while the declaration says nothing is flushed. Even a declared
// flush covers only results below twice the smallest normal (SPEC 4).
// Caught by ExtremeScoresStayFinite: its scores from 2^10 up put keys 70 to
// 745 below a row's max (weights between 2^-1074 and 2^-100) in most runs'
// first hundred cases, where MatchesOracle's regimes rarely do.

#include <cmath>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

double flushing_exp(double x) {
  const double y = std::exp(x);
  return y < 0x1p-100 ? 0.0 : y;
}

double flushing_softmax(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                        std::span<double> a) {
  const double m = allowed_max(s, ok);
  double l = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!ok[j]) continue;
    a[j] = flushing_exp(s[j] - m);
    l += a[j];
  }
  normalise(ok, l, a);
  return m + std::log(l);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_exp_flushes_tiny, "ExtremeScoresStayFinite"),
    [](const Problem& p) { return naive_forward(p, p.scale, true, by_rows(flushing_softmax)); }));

}  // namespace
}  // namespace attncheck::impls::broken
