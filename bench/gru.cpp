#include "gru.h"

#include <Eigen/Dense>
#include <cmath>
#include <cstdlib>
#include <random>

namespace attncheck::bench {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

int64_t gru_parameters(int64_t d_in, int64_t hidden) {
  return 3 * (d_in * hidden + hidden * hidden + 2 * hidden);
}

int64_t gru_hidden_matching(int64_t d_in, int64_t target) {
  int64_t best = 1;
  for (int64_t h = 1; gru_parameters(d_in, h) <= 2 * target; ++h) {
    if (std::llabs(gru_parameters(d_in, h) - target) < std::llabs(gru_parameters(d_in, best) - target))
      best = h;
  }
  return best;
}

GruLayer make_gru(int64_t d_in, int64_t hidden, uint64_t seed) {
  GruLayer g;
  g.d_in = d_in;
  g.hidden = hidden;
  std::mt19937_64 rng(seed);
  const float bound = 1.0f / std::sqrt(static_cast<float>(hidden));
  std::uniform_real_distribution<float> u(-bound, bound);
  const auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
  };
  fill(g.w_ih, d_in * 3 * hidden);
  fill(g.w_hh, hidden * 3 * hidden);
  fill(g.b_ih, 3 * hidden);
  fill(g.b_hh, 3 * hidden);
  return g;
}

std::vector<float> gru_forward(const GruLayer& g, const std::vector<float>& x, int64_t batch,
                               int64_t seq) {
  const int64_t h = g.hidden, g3 = 3 * h;
  const ConstMap w_ih(g.w_ih.data(), g.d_in, g3), w_hh(g.w_hh.data(), h, g3);
  const Eigen::Map<const Eigen::RowVectorXf> b_ih(g.b_ih.data(), g3), b_hh(g.b_hh.data(), g3);
  // The input side of every gate at every position at once: the part of a
  // GRU that parallelises over positions.
  RowMatrix gi = ConstMap(x.data(), batch * seq, g.d_in) * w_ih;
  gi.rowwise() += b_ih;
  std::vector<float> out(static_cast<size_t>(batch * seq * h));
  RowMatrix state = RowMatrix::Zero(batch, h), gh(batch, g3);
  for (int64_t t = 0; t < seq; ++t) {
    gh.noalias() = state * w_hh;
    gh.rowwise() += b_hh;
    for (int64_t b = 0; b < batch; ++b) {
      const float* in = gi.data() + (b * seq + t) * g3;
      const float* hh = gh.data() + b * g3;
      float* s = state.data() + b * h;
      float* o = out.data() + (b * seq + t) * h;
      for (int64_t c = 0; c < h; ++c) {
        const float r = sigmoid(in[c] + hh[c]);
        const float z = sigmoid(in[h + c] + hh[h + c]);
        const float n = std::tanh(in[2 * h + c] + r * hh[2 * h + c]);
        s[c] = (1.0f - z) * n + z * s[c];
        o[c] = s[c];
      }
    }
  }
  return out;
}

double gru_flops(int64_t d_in, int64_t hidden, int64_t batch, int64_t seq) {
  return 2.0 * static_cast<double>(batch * seq) * 3.0 * static_cast<double>(hidden) *
         static_cast<double>(d_in + hidden);
}

}  // namespace attncheck::bench
