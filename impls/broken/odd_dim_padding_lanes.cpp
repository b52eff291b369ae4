// A kernel that loads Q and K rows as vectors of 8 lanes straight from the
// unpadded [t][dk] buffers, for odd head dims from 33 up (the path taken
// for head dims outside its specialised list): the lanes past dk up to the
// next multiple of 8 are not zeroed but read from the start of the next row
// (q[i + 1][0 ..), k[j + 1][0 ..)); the last row of a slice reads zeros
// (its load is bounds-checked). Right for dk < 33, even dk and multiples
// of 8; a single query (tq = 1) has zero padding lanes and is right too.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kFirstOddDim = 33;

double lane(const Tensor& x, int64_t a, int64_t c, int64_t r, int64_t rows, int64_t dk,
            int64_t t) {
  if (t < dk) return x.at(a, c, r, t);
  return r + 1 < rows ? x.at(a, c, r + 1, t - dk) : 0.0;
}

ForwardResult padded_from_next_row(const Problem& p) {
  if (p.dk < kFirstOddDim || p.dk % 2 == 0) {
    return naive_forward(p, p.scale, true, correct_softmax());
  }
  const int64_t padded = (p.dk + kLanes - 1) / kLanes * kLanes;
  return naive_forward(with_loaded_qk(p, padded, lane), p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_odd_dim_padding_lanes", "MatchesOracle",
                "odd head dims >= 33 padded to a multiple of 8 with lanes read from the next "
                "row of Q and K instead of zeros"),
    padded_from_next_row));

}  // namespace
}  // namespace attncheck::impls::broken
