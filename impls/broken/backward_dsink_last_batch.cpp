// A sink backward that writes d sink_h per batch entry instead of adding
// to it (as a kernel whose (batch, head) programs store their partial sum
// where they should accumulate it atomically): d sink_h is the last batch
// entry's share of SPEC 1.1's sum over every batch entry and row. The
// forward pass, dQ, dK and dV are loop_f64's, correct.

#include <algorithm>
#include <memory>

#include "../loop_kernel.h"
#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// A row with dO = 0 has delta = 0 and adds nothing to d sink, so the
// backward of the problem with every other batch entry's dO zeroed gives
// exactly the last entry's share (packed queries included: out_index
// addresses a packed row).
BackwardResult dsink_of_last_batch_entry(const Problem& p) {
  BackwardResult r = loop_backward<double>(p, EmptyRowPolicy::error);
  if (r.status != Status::ok || p.sink.empty()) return r;
  Problem last = p;
  for (int64_t b = 0; b + 1 < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seq_tq(b); ++i)
        for (int64_t d = 0; d < p.dv; ++d) last.dout[out_index(p, b, h, i, d)] = 0.0;
  r.dsink = loop_backward<double>(last, EmptyRowPolicy::error).dsink;
  return r;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_backward_dsink_last_batch", "GradientsMatchOracle",
                "sink backward: d sink from the last batch entry only (written per batch "
                "entry, not accumulated); forward, dQ, dK, dV correct",
                kLoopFeatures | ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_PACKED |
                    ATTNCHECK_FEATURE_BACKWARD),
    [](const Problem& p) { return loop_forward<double>(p, EmptyRowPolicy::error); },
    dsink_of_last_batch_entry));

}  // namespace
}  // namespace attncheck::impls::broken
