// A causal kernel over tiles of 64 queries and blocks of 32 keys that takes
// the last key block a tile visits from the position of the tile's FIRST
// row instead of its last: rows of the tile whose position lies in a later
// key block lose the keys of that block up to their own position. Top-left
// it takes a row 32 or more rows into a tile (tq >= 33); bottom-right any
// two rows whose positions straddle a 32-key boundary (tk >= 33). Rows of
// at most 32 keys are one block and come out right.

#include <algorithm>
#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyBlock = 32;

ImplInfo info() {
  ImplInfo i = broken_info("broken_causal_bound_first_row", "MatchesOracle",
                           "causal 64-query tiles whose last key block comes from the tile's "
                           "first row instead of its last");
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
