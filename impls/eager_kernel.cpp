#include "eager_kernel.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "impl_common.h"

namespace attncheck::impls {
namespace {

// One op's result stored in the tensor's format: computed in float, as
// PyTorch's CPU kernels for bf16 / f16 do, then rounded.
float stored(DType format, float x) {
  return static_cast<float>(round_to(format, static_cast<double>(x)));
}

}  // namespace

ForwardResult eager_forward(const Problem& p, DType format) {
  if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const auto tk = static_cast<size_t>(p.tk);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(rows * tk, 0.0);

  // A Python float scale and softcap reach the ops as float scalars.
  const float scale = static_cast<float>(p.scale);
  const float cap = static_cast<float>(p.softcap);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> s(tk), a(tk);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t j = 0; j < p.tk; ++j) {
          float dot = 0;  // products of 8- or 11-bit significands are exact in float
          for (int64_t d = 0; d < p.dk; ++d) {
            dot += static_cast<float>(p.q.at(b, h, i, d)) * static_cast<float>(p.k.at(b, g, j, d));
          }
          float x = stored(format, stored(format, dot) * scale);
          if (p.softcap > 0) {
            x = stored(format, x / cap);
            x = stored(format, std::tanh(x));
            x = stored(format, x * cap);
          }
          if (p.bias) x = stored(format, x + static_cast<float>(p.bias_at(b, h, i, j)));
          s[static_cast<size_t>(j)] = p.allowed(b, h, i, j) ? x : kNegInf;
        }
        // softmax(S, dim=-1, dtype=float32): the max, exp and sum in float
        // from the stored scores; masked keys are exp(-inf) = 0.
        float m = kNegInf;
        for (float x : s) m = std::max(m, x);
        float l = 0;
        for (size_t j = 0; j < tk; ++j) {
          a[j] = std::exp(s[j] - m);
          l += a[j];
        }
        const size_t row = row_index(p, b, h, i);
        for (size_t j = 0; j < tk; ++j) {
          a[j] = stored(format, a[j] / l);  // .to(format)
          r.weights[row * tk + j] = static_cast<double>(a[j]);
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          float o = 0;
          for (int64_t j = 0; j < p.tk; ++j) {
            o += a[static_cast<size_t>(j)] * static_cast<float>(p.v.at(b, g, j, d));
          }
          r.out[out_index(p, b, h, i, d)] = round_to(format, static_cast<double>(o));
        }
      }
    }
  }
  return r;
}

ImplInfo eager_info(std::string name, DType format, std::string description) {
  ImplInfo info = reference_info(std::move(name), format, kLoopFeatures & ~ATTNCHECK_FEATURE_LSE,
                                 EmptyRowPolicy::error, std::move(description));
  info.precision = kernel_precision(DType::f32, format, 0);
  info.precision.s_cast = format;
  return info;
}

}  // namespace attncheck::impls
