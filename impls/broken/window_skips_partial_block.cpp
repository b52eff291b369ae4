// A sliding-window kernel over 64-key blocks whose key loop starts at the
// first block that lies wholly inside the window (the left edge rounded up
// to a block), so that only the block holding the row's right edge needs a
// mask: when the left edge p_i - left is not block aligned, the first,
// partly visible block is skipped, unless it is also the right edge's
// block. Right whenever a row's window fits in one 64-key block, as every
// row of at most 64 keys does.

#include <algorithm>
#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kBlock = 64;

ImplInfo info() {
  ImplInfo i = broken_info("broken_window_skips_partial_block", "MatchesOracle",
                           "sliding window over 64-key blocks that skips the first, partly "
                           "visible block when the window's left edge is not block aligned");
  // f32 as the kernels it models (and f64, as every broken implementation
  // runs): the real-size phase reaches windows past one block at f32's
  // cost cap.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, correct_softmax(),
                       [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                         if (!p.allowed(b, h, i, j)) return false;
                         if (p.window_left < 0) return true;
                         const int64_t pos = p.position(i);
                         const int64_t left = pos - p.window_left;
                         int64_t right = p.tk - 1;
                         if (p.window_right >= 0) right = std::min(right, pos + p.window_right);
                         if (p.causal) right = std::min(right, pos);
                         const bool partial = left > 0 && left % kBlock != 0;
                         const bool skipped = partial && left / kBlock != right / kBlock &&
                                              j / kBlock == left / kBlock;
                         return !skipped;
                       });
}));

}  // namespace
}  // namespace attncheck::impls::broken
