// A row-max cache keyed by (head, query) but not by batch: every batch
// entry reuses the maxima computed for batch 0.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Softmax is invariant to the shift, so results stay close while the
// batches' scores are alike; but changing batch 0 changes the rounding of
// every other batch, and a max far from a row's own overflows or
// underflows it.
ForwardResult shared_max(const Problem& p) {
  std::vector<double> cached(static_cast<size_t>(p.heads * p.tq));
  int64_t slice = 0;
  const SliceSoftmax softmax = [&](const SliceScores& sc) {
    const int64_t b = slice / p.heads, h = slice % p.heads;
    ++slice;
    SliceWeights w;
    const auto tk = static_cast<size_t>(sc.tk);
    w.a.assign(sc.s.size(), 0.0);
    w.lse.resize(static_cast<size_t>(sc.tq));
    for (int64_t i = 0; i < sc.tq; ++i) {
      const size_t row = static_cast<size_t>(i) * tk;
      const auto s = std::span(sc.s).subspan(row, tk);
      const auto ok = std::span(sc.ok).subspan(row, tk);
      const auto a = std::span(w.a).subspan(row, tk);
      double& m = cached[static_cast<size_t>(h * p.tq + i)];
      if (b == 0) m = allowed_max(s, ok);
      const double l = exp_and_sum(s, ok, m, a);
      normalise(ok, l, a);
      w.lse[static_cast<size_t>(i)] = m + std::log(l);
    }
    return w;
  };
  return naive_forward(p, p.scale, true, softmax);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_batch_head_leak", "BatchHeadIndependence",
                "the row maxima of batch 0 are reused for every batch entry, "
                "so batch 0 changes the others' rounding"),
    shared_max));

}  // namespace
}  // namespace attncheck::impls::broken
