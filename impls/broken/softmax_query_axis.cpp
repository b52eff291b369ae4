// Softmax over the query axis: a transposed reduction axis, as in kernels
// that mix up row- and column-major score tiles.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Each key's column is normalised over the queries, so rows no longer sum
// to one; with one query every weight is 1. lse is the correct row lse, so
// only the weights and the output show the bug.
SliceWeights softmax_over_queries(const SliceScores& sc) {
  SliceWeights w;
  w.a.assign(sc.s.size(), 0.0);
  w.lse.resize(static_cast<size_t>(sc.tq));
  for (int64_t j = 0; j < sc.tk; ++j) {
    auto at = [&](int64_t i) { return static_cast<size_t>(i * sc.tk + j); };
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < sc.tq; ++i) m = std::max(m, sc.s[at(i)]);
    double l = 0;
    for (int64_t i = 0; i < sc.tq; ++i)
      l += w.a[at(i)] = std::exp(sc.s[at(i)] - m);
    for (int64_t i = 0; i < sc.tq; ++i) w.a[at(i)] /= l;
  }
  // Only the lse of the correct row softmax is kept.
  std::vector<double> discarded(static_cast<size_t>(sc.tk));
  for (int64_t i = 0; i < sc.tq; ++i) {
    const auto at = static_cast<size_t>(i * sc.tk);
    const auto tk = static_cast<size_t>(sc.tk);
    w.lse[static_cast<size_t>(i)] =
        stable_softmax(std::span(sc.s).subspan(at, tk),
                       std::span(sc.ok).subspan(at, tk), discarded);
  }
  return w;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_softmax_query_axis, "MatchesOracle",
                ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_LSE | ATTNCHECK_FEATURE_SCALE |
                    ATTNCHECK_FEATURE_STRIDES),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, softmax_over_queries);
    }));

}  // namespace
}  // namespace attncheck::impls::broken
