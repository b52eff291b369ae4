// An f32 kernel that takes rows of more than 64 allowed keys through an
// online (tiled) path whose running max starts at 0 instead of -inf (a
// zero-initialised register: `float m = 0`); shorter rows take a correct
// one-pass path. Exact while a long row's max score is at least 0. A long
// row whose every score is below about -87 takes exp(s - 0) into f32's
// subnormals (precision lost), below about -104 to 0, and then the sum is
// 0 and the weights 0/0 = NaN.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kShortRow = 64;

double max_from_zero(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                     std::span<double> a) {
  int64_t allowed = 0;
  for (uint8_t x : ok) allowed += x;
  if (allowed <= kShortRow) return stable_softmax(s, ok, a);
  float m = 0;  // the bug: -inf is right
  for (size_t j = 0; j < s.size(); ++j)
    if (ok[j]) m = std::max(m, static_cast<float>(s[j]));
  return f32_softmax_from_max(s, ok, m, a);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_running_max_from_zero", "MatchesOracle",
                           "f32 softmax whose path for rows of more than 64 keys starts its "
                           "running max at 0 instead of -inf: rows whose every score is far "
                           "below 0 underflow to 0/0");
  // f32 as the kernel it models (its arithmetic is f32's whatever the
  // format); f64 too, as every broken implementation runs in f64.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(max_from_zero));
}));

}  // namespace
}  // namespace attncheck::impls::broken
