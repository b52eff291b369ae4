// An f32 tiled softmax that takes the row max over its first key block of
// 64 only (the max is "known" from the first tile, as a kernel that skips
// the online rescale assumes): right whenever no later key scores much
// higher. A key past the first block that scores more than about 88.7
// above the first block's max overflows exp in f32: inf / inf = NaN.

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

constexpr size_t kBlock = 64;

double max_of_first_block(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                          std::span<double> a) {
  // The first block that has an allowed key (a masked first block would
  // give -inf, which even this kernel guards against).
  float m = -std::numeric_limits<float>::infinity();
  for (size_t start = 0; start < s.size() && m == -std::numeric_limits<float>::infinity();
       start += kBlock)
    for (size_t j = start; j < std::min(s.size(), start + kBlock); ++j)
      if (ok[j]) m = std::max(m, static_cast<float>(s[j]));
  return f32_softmax_from_max(s, ok, m, a);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_max_from_first_block", "MatchesOracle",
                           "f32 softmax taking the row max over its first key block of 64 "
                           "only: a dominant key later in the row overflows exp");
  // f32 as the kernel it models (its arithmetic is f32's whatever the
  // format); f64 too, as every broken implementation runs in f64.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = kernel_precision(DType::f32, DType::f32, static_cast<int64_t>(kBlock));
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(max_of_first_block));
}));

}  // namespace
}  // namespace attncheck::impls::broken
