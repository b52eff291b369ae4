// A fixed-size key tile: only the first 16 keys of a row are ever loaded,
// as in kernels with a hard-coded maximum sequence length. Invisible on the
// short rows most properties draw.

#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kTile = 16;

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_fixed_key_tile", "CrossImplementationAgreement",
                "loads only the first 16 keys of every row (a fixed-size key tile)"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             return j < kTile && p.allowed(b, h, i, j);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
