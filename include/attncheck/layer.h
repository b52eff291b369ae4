#pragma once
// The `layer` kind: a multi-head attention layer with projections W_q,
// W_k, W_v, W_o around an attention core. An implementation of kind layer
// derives from both Implementation (its forward is the attention core, what
// the layer computes with identity projections) and Layer, through which
// MultiHeadConsistency checks the projections and the split into heads.

#include <cstdint>
#include <string>
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

}  // namespace attncheck
