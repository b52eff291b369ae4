// Online (flash-style) softmax over key blocks that forgets to rescale what
// it has accumulated when the running max grows.

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

// Each block's weights are exp(s - m) with the max known at that block, but
// earlier weights and the sum keep their old max: right when the first
// block holds the row max, too large for earlier blocks otherwise.
double no_rescale(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                  std::span<double> a) {
  return online_softmax(s, ok, a, {.block = kBlock, .rescale = false});
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_online_no_rescale", "MatchesOracle",
                           "online softmax over key blocks of 2 that does not rescale the "
                           "accumulated weights and sum when the running max increases");
  i.precision.key_block = static_cast<int64_t>(kBlock);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(no_rescale));
}));

}  // namespace
}  // namespace attncheck::impls::broken
