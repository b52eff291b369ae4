// Online softmax without the guard for a fully masked block: while the
// running max is still -inf, exp(-inf - -inf) = NaN poisons the row.
// flash-attention guards this case ("Check_inf") for exactly that reason.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr size_t kBlock = 2;

// Like a tiled kernel, each block computes exp(x - m_new) for every key,
// masked ones holding x = -inf. A masked block after an allowed key gives
// exact zeros; a leading one (key padding or a mask at the start, or a
// window's left edge) has m_new = -inf and makes its weights, the rescale
// factor and the sum NaN.
double unguarded(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                 std::span<double> a) {
  return online_softmax(s, ok, a, {.block = kBlock, .guard_masked_blocks = false});
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_online_masked_block_nan", "MatchesOracle",
                           "online softmax over key blocks of 2 without the -inf guard: a fully "
                           "masked leading block computes exp(-inf - -inf) = NaN");
  i.precision.key_block = static_cast<int64_t>(kBlock);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(unguarded));
}));

}  // namespace
}  // namespace attncheck::impls::broken
