// A backward pass that forgets the softcap's chain rule: the gradient with
// respect to the capped logits is passed on as the gradient of the raw
// ones (dT = dS instead of dS (1 - tanh^2(t / c))). The forward pass is
// loop_f64's, correct.

#include <cmath>
#include <memory>

#include "../loop_kernel.h"
#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Exactly the bug: the backward of a problem without softcap whose bias
// turns the raw logits t into the capped ones, c tanh(t / c) + bias. Its
// weights are (up to rounding) the capped problem's, and its dT is dS.
BackwardResult no_softcap_chain(const Problem& p) {
  if (p.softcap <= 0) return loop_backward<double>(p, EmptyRowPolicy::error);
  Problem uncapped = p;
  uncapped.softcap = 0;
  Broadcast<double> bias;
  bias.batch = p.batch;
  bias.heads = p.heads;
  bias.data.resize(static_cast<size_t>(p.score_elements()));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < p.dk; ++d)
            dot += p.q.at(b, h, i, d) * p.k.at(b, p.kv_head(h), j, d);
          const double t = p.scale * dot;
          bias.at(b, h, i, j, p.tq, p.tk) =
              p.softcap * std::tanh(t / p.softcap) - t + p.bias_at(b, h, i, j);
        }
  uncapped.bias = std::move(bias);
  return loop_backward<double>(uncapped, EmptyRowPolicy::error);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_backward_no_softcap_chain", "GradientsMatchOracle",
                "backward omits the softcap derivative 1 - tanh^2(t / c); "
                "forward correct",
                kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD),
    [](const Problem& p) { return loop_forward<double>(p, EmptyRowPolicy::error); },
    no_softcap_chain));

}  // namespace
}  // namespace attncheck::impls::broken
