// A multi-head layer that splits heads with a bare reshape: the projected
// B x T x (H dk) buffer read as B x H x T x dk without the transpose, so
// "head" h holds the features of other tokens (and merged back the same
// way). Right whenever H = 1 or T = 1.

#include <cstdint>
#include <memory>

#include "../mha_kernel.h"
#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

size_t reshaped_without_transpose(int64_t b, int64_t h, int64_t t, int64_t c, int64_t tokens,
                                  int64_t heads, int64_t dk) {
  return static_cast<size_t>(((b * heads + h) * tokens + t) * dk + c);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_mha_head_split", "MultiHeadConsistency",
                           "multi-head layer that reshapes the projected B x T x H x dk "
                           "buffer as B x H x T x dk without transposing, mixing tokens "
                           "and heads");
  // mha_f32's twin; f64 too, as every broken implementation runs in f64.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<MhaLayer>(info(), reshaped_without_transpose));

}  // namespace
}  // namespace attncheck::impls::broken
