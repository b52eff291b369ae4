// An f32 kernel whose row sum l switches to a bf16 accumulator for rows of
// more than 256 allowed keys (a "fast path" for long rows that keeps the
// running sum in the format of P): past 256 the spacing of bf16 is 2, so
// adding weights below 1 stalls and l comes out too small. Rows of at most
// 256 allowed keys take the exact path.

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kShortRow = 256;

double lossy_long_rows(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                       std::span<double> a) {
  int64_t allowed = 0;
  for (uint8_t x : ok) allowed += x;
  if (allowed <= kShortRow) return stable_softmax(s, ok, a);
  const double m = allowed_max(s, ok);
  double l = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!ok[j]) continue;
    a[j] = std::exp(s[j] - m);
    l = round_to(DType::bf16, l + a[j]);
  }
  normalise(ok, l, a);
  return m + std::log(l);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_long_row_lossy_sum", "RowSumsToOne",
                           "f32 softmax whose row sum is accumulated in bf16 for rows of more "
                           "than 256 allowed keys");
  // f32 as the kernel it models; f64 too, as every broken implementation
  // runs in f64. The short path (double) is well within the f32 traits it
  // declares; the long path is not.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(lossy_long_rows));
}));

}  // namespace
}  // namespace attncheck::impls::broken
