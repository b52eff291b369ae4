// QK-norm left on: keys are scaled to unit L2 norm before the dot product,
// which the caller did not ask for.

#include <cmath>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ForwardResult forward(const Problem& p) {
  Problem normalised = p.contiguous();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        double norm = 0;
        for (int64_t d = 0; d < p.dk; ++d) norm += p.k.at(b, g, j, d) * p.k.at(b, g, j, d);
        if (norm == 0) continue;
        for (int64_t d = 0; d < p.dk; ++d) normalised.k.at(b, g, j, d) /= std::sqrt(norm);
      }
  return naive_forward(normalised, p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_key_l2_normalised", "KeyTranslationInvariance",
                "keys are normalised to unit length before the dot product (QK-norm left on)"),
    forward));

}  // namespace
}  // namespace attncheck::impls::broken
