#pragma once
// The multi-head attention layer of exercise 4 in float: the multi-head
// step of attncheck/layer.h (projections, the split into heads, the merge
// and the output projection) around the loop kernel. The split is a
// parameter so the broken twin can get it wrong.

#include <cstdint>
#include <utility>

#include "attncheck/implementation.h"
#include "attncheck/layer.h"

namespace attncheck::impls {

/// A layer computing in the call's format (float for f32, double for f64;
/// other dtypes, or one `info` does not declare, are unsupported):
/// run_multi_head with `split` and loop_forward per head with the default
/// scale (empty rows an error) as the core. Its forward is loop_forward in
/// the problem's format, the attention core.
class MhaLayer : public Implementation, public Layer {
 public:
  MhaLayer(ImplInfo info, HeadIndex split) : info_(std::move(info)), split_(split) {}

  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override;
  /// 4 d_model^2: the four projections, no biases.
  int64_t parameter_count(int64_t d_model, int64_t heads) const override;
  LayerResult run(const LayerWeights& w, const LayerInput& x) const override;

 private:
  ImplInfo info_;
  HeadIndex split_;
};

}  // namespace attncheck::impls
