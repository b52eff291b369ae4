// A causal kernel over tiles of 128 queries (two 64-row halves) and blocks
// of 64 keys, as flash-attention 2 tiles small head dims, that takes the
// last key block a tile visits from the position of the tile's FIRST row
// instead of its last: rows of the tile whose position lies in a later key
// block lose the keys of that block up to their own position. Top-left it
// takes a row 64 or more rows into a tile (tq >= 65, a second 64-query
// tile); bottom-right any two rows whose positions straddle a 64-key
// boundary (tk >= 65). Rows of at most 64 keys are one block and come out
// right.

#include <algorithm>
#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kQueryTile = 128;
constexpr int64_t kKeyBlock = 64;

ImplInfo info() {
  ImplInfo i = broken_info("broken_causal_bound_first_row", "MatchesOracle",
                           "causal 128-query tiles whose last 64-key block comes from the "
                           "tile's first row instead of its last");
  // f32 as the kernels it models (and f64): tiles of several queries over
  // several key blocks fit f32's cost cap at real size.
  i.dtypes = dtype_bit(DType::f32) | dtype_bit(DType::f64);
  i.precision = one_pass_precision(DType::f32);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, correct_softmax(),
                       [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                         if (!p.allowed(b, h, i, j)) return false;
                         if (!p.causal) return true;
                         const int64_t first_row = i / kQueryTile * kQueryTile;
                         const int64_t bound = std::max<int64_t>(0, p.position(first_row));
                         return j / kKeyBlock <= bound / kKeyBlock;
                       });
}));

}  // namespace
}  // namespace attncheck::impls::broken
