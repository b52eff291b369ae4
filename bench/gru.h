#pragma once
// The GRU layer of exercise 8's cost comparison (attention layer against a
// GRU of matched parameter count), in float with Eigen. Bench code only: it
// is not an attention implementation, so it is never registered (the
// registry's implementations are property-checked).

#include <cstdint>
#include <vector>

namespace attncheck::bench {

/// A GRU layer (PyTorch's gate layout r, z, n and two bias vectors):
///   r = sigmoid(x W_ir + b_ir + h W_hr + b_hr)
///   z = sigmoid(x W_iz + b_iz + h W_hz + b_hz)
///   n = tanh(x W_in + b_in + r * (h W_hn + b_hn))
///   h' = (1 - z) * n + z * h
struct GruLayer {
  int64_t d_in = 0, hidden = 0;
  std::vector<float> w_ih;  ///< [d_in][3 hidden], row-major
  std::vector<float> w_hh;  ///< [hidden][3 hidden]
  std::vector<float> b_ih, b_hh;  ///< [3 hidden]
};

/// 3 (d_in h + h^2 + 2 h): PyTorch's nn.GRU count for one layer.
int64_t gru_parameters(int64_t d_in, int64_t hidden);

/// The hidden size whose parameter count is closest to `target`.
int64_t gru_hidden_matching(int64_t d_in, int64_t target);

/// A layer with weights drawn from `seed` (uniform, scaled by 1/sqrt(hidden)).
GruLayer make_gru(int64_t d_in, int64_t hidden, uint64_t seed);

/// The hidden states of every position, [batch][seq][hidden], for inputs x
/// [batch][seq][d_in] and a zero initial state: the input projections of
/// all positions as one product, then seq sequential steps.
std::vector<float> gru_forward(const GruLayer& g, const std::vector<float>& x, int64_t batch,
                               int64_t seq);

/// Floating-point operations of gru_forward (the products; gates not counted).
double gru_flops(int64_t d_in, int64_t hidden, int64_t batch, int64_t seq);

}  // namespace attncheck::bench
