#pragma once
// The multi-head attention layer of exercise 4 in float: projections, the
// split into heads, the loop kernel per head, the merge and the output
// projection. The split is a parameter so the broken twin can get it wrong.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "attncheck/implementation.h"
#include "attncheck/layer.h"

namespace attncheck::impls {

/// Where element c of head h at token t of batch entry b lives in a
/// projected buffer [batch][tokens][heads * dk].
using HeadIndex = std::function<size_t(int64_t b, int64_t h, int64_t t, int64_t c, int64_t tokens,
                                       int64_t heads, int64_t dk)>;

/// The split of exercise 4: a token's row of width d = heads * dk is
/// [head 0 | head 1 | ...], so the buffer is B x T x H x dk and head h of
/// token t is at ((b T + t) H + h) dk + c; read that way it is B x H x T x dk.
size_t split_heads(int64_t b, int64_t h, int64_t t, int64_t c, int64_t tokens, int64_t heads,
                   int64_t dk);

/// A layer computing in the call's format (float for f32, double for f64;
/// other dtypes, or one `info` does not declare, are unsupported):
/// Q = X_q W_q, K = X_kv W_k, V = X_kv W_v as dot products; heads taken
/// out with `split`; loop_forward per head with the default scale (empty
/// rows an error); heads put back with `split`; Y = C W_o. Its forward is
/// loop_forward in the problem's format, the attention core.
class MhaLayer : public Implementation, public Layer {
 public:
  MhaLayer(ImplInfo info, HeadIndex split) : info_(std::move(info)), split_(std::move(split)) {}

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
