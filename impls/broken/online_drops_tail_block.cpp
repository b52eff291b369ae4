// Online softmax whose block loop runs tk / block times (rounding down), so
// a last, partial key block is never visited.

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

constexpr size_t kBlock = 4;

// Correct over the full blocks (max, rescale, sum); the keys past the last
// full block get no weight, and a row shorter than one block has none.
double drop_tail(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                 std::span<double> a) {
  return online_softmax(s, ok, a, {.block = kBlock, .drop_partial_block = true});
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_online_drops_tail_block", "MatchesOracle",
                           "online softmax over key blocks of 4 that skips the last block when "
                           "tk is not a multiple of 4");
  i.precision.key_block = static_cast<int64_t>(kBlock);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(drop_tail));
}));

}  // namespace
}  // namespace attncheck::impls::broken
