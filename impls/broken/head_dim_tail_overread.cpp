// A kernel whose q.k product loads head dims past 64 that are not a
// multiple of 8 with full 8-lane loads: the last load of a row reads past
// its end into whatever the tensor's strides put there (the next key or
// query row, the next head's first row, a layout's gap), and those lanes
// enter the dot product. The very last row of a buffer reads zeros (its
// load is bounds-checked). Right for dk <= 64 and multiples of 8.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kLastExactDim = 64;

// Lane t of row r of slice (a, c): past dk, the element the row's base
// plus t strides addresses in the buffer.
double overread(const Tensor& x, int64_t a, int64_t c, int64_t r, int64_t, int64_t dk,
                int64_t t) {
  if (t < dk) return x.at(a, c, r, t);
  const int64_t at = a * x.strides[0] + c * x.strides[1] + r * x.strides[2] + t * x.strides[3];
  return at < static_cast<int64_t>(x.data.size()) ? x.data[static_cast<size_t>(at)] : 0.0;
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_head_dim_tail_overread", "MatchesOracle",
                           "head dims past 64, not a multiple of 8, loaded with full 8-lane "
                           "loads that read the next row into q.k");
  // f32 as the kernels it models (and f64): odd head dims past 64 fit
  // f32's cost cap at real size.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  if (p.dk <= kLastExactDim || p.dk % kLanes == 0) {
    return naive_forward(p, p.scale, true, correct_softmax());
  }
  const int64_t loaded = (p.dk + kLanes - 1) / kLanes * kLanes;
  return naive_forward(with_loaded_qk(p, loaded, overread), p.scale, true, correct_softmax());
}));

}  // namespace
}  // namespace attncheck::impls::broken
