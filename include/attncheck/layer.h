#pragma once
// The `layer` kind: a multi-head attention layer with projections W_q,
// W_k, W_v, W_o around an attention core. An implementation of kind layer
// derives from both Implementation (its forward is the attention core, what
// the layer computes with identity projections) and Layer, through which
// MultiHeadConsistency checks the projections and the split into heads.
// The multi-head step itself (project, split, core, merge, project) is
// run_multi_head, shared by the built-in layers and the bench's layer
// around any implementation.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck {

/// The projections of a layer of width d_model, each d_model x d_model,
/// row-major, acting on row vectors: Q = X_q W_q, K = X_kv W_k,
/// V = X_kv W_v, Y = concat(heads) W_o. Values exactly representable in
/// the call's dtype.
struct LayerWeights {
  int64_t d_model = 0;
  std::vector<double> w_q, w_k, w_v, w_o;  ///< [d_model][d_model] each
};

/// One call of a layer: the inputs, the number of heads and the attention
/// options its core applies.
struct LayerInput {
  DType dtype = DType::f32;  ///< of x, the weights and y
  int64_t batch = 1, tq = 1, tk = 1;
  /// H; d_model % heads == 0, and each head has dk = dv = d_model / heads.
  int64_t heads = 1;
  std::vector<double> x_q;         ///< [batch][tq][d_model]
  std::vector<double> x_kv;        ///< [batch][tk][d_model]
  std::vector<uint8_t> key_valid;  ///< [batch][tk], 1 = allowed; empty = all
  bool causal = false;
  Align align = Align::top_left;
};

/// What a layer call returns.
struct LayerResult {
  Status status = Status::ok;
  std::string error;      ///< message when status is error
  std::vector<double> y;  ///< [batch][tq][d_model], in the call's dtype
};

/// A multi-head attention layer (exercises 4 and 9).
class Layer {
 public:
  virtual ~Layer() = default;

  /// The number of trainable parameters of the layer with width d_model
  /// and `heads` heads (d_model % heads == 0). With the standard
  /// projections it is 4 d_model^2 whatever the number of heads.
  virtual int64_t parameter_count(int64_t d_model, int64_t heads) const = 0;

  /// Runs the layer: Q, K, V projected from x; each split into x.heads
  /// heads as B x H x T x dk (head h takes columns [h dk, (h + 1) dk) of a
  /// token's projected row); per head, attention with the default scale
  /// (the double nearest 1 / sqrt(dk)), x's key padding and causal mask;
  /// the heads' outputs concatenated back into B x Tq x d_model in the same
  /// column order; Y = that times W_o.
  virtual LayerResult run(const LayerWeights& w, const LayerInput& x) const = 0;
};

/// Where element c of head h at token t of batch entry b lives in a
/// projected buffer [batch][tokens][heads * dk]. A parameter of the step so
/// a deliberately broken layer can get the split wrong.
using HeadIndex = size_t (*)(int64_t b, int64_t h, int64_t t, int64_t c, int64_t tokens,
                             int64_t heads, int64_t dk);

/// The split of exercise 4: a token's row of width d = heads * dk is
/// [head 0 | head 1 | ...], so the buffer is B x T x H x dk and head h of
/// token t is at ((b T + t) H + h) dk + c; read that way it is B x H x T x dk.
size_t split_heads(int64_t b, int64_t h, int64_t t, int64_t c, int64_t tokens, int64_t heads,
                   int64_t dk);

/// The attention a layer applies to its heads: called once per layer call
/// with every head as one problem B x H x T x dk, which it may complete
/// with options LayerInput does not carry (a window, say) before computing;
/// the step discards the problem afterwards.
using AttentionCore = std::function<ForwardResult(Problem& heads)>;

/// The multi-head step of Layer::run around `core`, computed in the call's
/// format (float for f32, double for f64; other dtypes are unsupported):
/// Q = X_q W_q, K = X_kv W_k, V = X_kv W_v, each element a dot product
/// accumulated in that format in index order; heads taken out with `split`
/// into one problem with the default scale and x's key padding, causal
/// mask and alignment; `core` on it (a status other than ok is the layer's,
/// with its message); the heads put back with `split`; Y = C W_o. An error
/// result, not an exception, when d_model is not a positive multiple of
/// x.heads or the weights or inputs have the wrong sizes.
LayerResult run_multi_head(const LayerWeights& w, const LayerInput& x, const AttentionCore& core,
                           HeadIndex split = split_heads);

/// A layer around an attention core that is not a layer itself: the bench
/// measures a kernel inside the projections this way. Built once; each run
/// is run_multi_head with the standard split.
class MultiHeadLayer : public Layer {
 public:
  explicit MultiHeadLayer(AttentionCore core) : core_(std::move(core)) {}

  /// 4 d_model^2: the four projections, no biases.
  int64_t parameter_count(int64_t d_model, int64_t heads) const override;
  LayerResult run(const LayerWeights& w, const LayerInput& x) const override;

 private:
  AttentionCore core_;
};

}  // namespace attncheck
