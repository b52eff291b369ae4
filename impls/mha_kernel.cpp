#include "mha_kernel.h"

#include "loop_kernel.h"

namespace attncheck::impls {

ForwardResult MhaLayer::forward(const Problem& p) const {
  return p.dtype == DType::f64 ? loop_forward<double>(p, EmptyRowPolicy::error)
                               : loop_forward<float>(p, EmptyRowPolicy::error);
}

int64_t MhaLayer::parameter_count(int64_t d_model, int64_t heads) const {
  (void)heads;  // the heads split W's columns; they add no parameters
  return 4 * d_model * d_model;
}

LayerResult MhaLayer::run(const LayerWeights& w, const LayerInput& x) const {
  if (!info_.supports(x.dtype)) {
    LayerResult r;
    r.status = Status::unsupported;
    return r;
  }
  return run_multi_head(w, x, [this](Problem& heads) { return forward(heads); }, split_);
}

}  // namespace attncheck::impls
