// Online softmax over 64-key tiles whose tile loop runs tk / 64 times
// (rounding down) once the row is longer than one tile, so the last,
// partial tile is never visited; a row of at most 64 keys is one tile and
// comes out right. Invisible on every problem of at most 64 keys.

#include <cstdint>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr size_t kTile = 64;

// Correct over the full tiles (max, rescale, sum); the keys past the last
// full tile get no weight when tk > 64 and tk % 64 != 0.
double drop_tail_tile(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                      std::span<double> a) {
  return online_softmax(s, ok, a,
                        {.block = kTile, .drop_partial_block = s.size() > kTile});
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_tile64_drops_tail", "MatchesOracle",
                           "online softmax over 64-key tiles that skips the last, partial tile "
                           "when tk > 64 and tk is not a multiple of 64");
  i.precision.key_block = static_cast<int64_t>(kTile);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(drop_tail_tile));
}));

}  // namespace
}  // namespace attncheck::impls::broken
