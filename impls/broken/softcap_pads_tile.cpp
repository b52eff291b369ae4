// A tiled path over 64-key tiles, taken from 64 queries when no key is
// masked (no key padding, mask, causal or window), that pads the last key
// tile with -inf scores and then applies the softcap to the whole tile:
// cap * tanh(-inf / cap) = -cap is finite, so each padded slot becomes a
// key of score -cap (and value 0) that the row sum counts. Right without
// a softcap, with any mask (the masked path sets -inf after the softcap),
// below 64 queries and when tk is a multiple of 64.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kTile = 64;
constexpr int64_t kTiledFromTq = 64;

ImplInfo info() {
  ImplInfo i = broken_info("broken_softcap_pads_tile", "MatchesOracle",
                           "softcap applied to the -inf padding of the last 64-key tile on the "
                           "unmasked tiled path (tq >= 64): padded slots count as keys of score "
                           "-softcap");
  // f32 as the kernels it models (and f64): 64 queries over several tiles
  // fit f32's cost cap at real size.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  const bool unmasked = p.key_valid.empty() && !p.mask && !p.causal && p.window_left < 0 &&
                        p.window_right < 0;
  const int64_t padded = (kTile - p.tk % kTile) % kTile;
  if (!(p.softcap > 0 && unmasked && p.tq >= kTiledFromTq && padded > 0)) {
    return naive_forward(p, p.scale, true, correct_softmax());
  }
  const double slot = -p.softcap;  // a padded slot's score after the softcap
  return naive_forward(p, p.scale, true,
                       by_rows([=](std::span<const double> s, std::span<const uint8_t> ok,
                                   int64_t, std::span<double> a) {
                         const double m = std::max(allowed_max(s, ok), slot);
                         const double l = exp_and_sum(s, ok, m, a) +
                                          static_cast<double>(padded) * std::exp(slot - m);
                         normalise(ok, l, a);
                         return m + std::log(l);
                       }));
}));

}  // namespace
}  // namespace attncheck::impls::broken
