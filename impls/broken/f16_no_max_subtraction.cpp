// An f16 softmax that keeps P = exp(s) in f16 without subtracting the row
// max first: exp(s) passes f16's largest value 65504 at s = 11.09, far
// below float's overflow point, and the row becomes inf / inf = NaN.

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

double unshifted_f16(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                     std::span<double> a) {
  float l = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!ok[j]) continue;
    a[j] = round_to(DType::f16, std::exp(static_cast<float>(s[j])));
    l += static_cast<float>(a[j]);
  }
  normalise(ok, l, a);
  return std::log(l);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_f16_no_max_subtraction", "ExtremeScoresStayFinite",
                           "f16 softmax holding P = exp(s) in f16 without subtracting the row "
                           "max: scores above 11.09 overflow 65504 to inf and NaN");
  // f64 inputs too (every broken implementation runs in f64): P is held
  // in f16 whatever the input format, so it overflows the same way.
  i.dtypes = dtype_bit(DType::f16) | dtype_bit(DType::f64);
  i.precision = kernel_precision(DType::f32, DType::f16, 0);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(unshifted_f16));
}));

}  // namespace
}  // namespace attncheck::impls::broken
