#include "attncheck/layer.h"

#include <string>
#include <vector>

namespace attncheck {
namespace {

LayerResult layer_error(std::string message) {
  LayerResult r;
  r.status = Status::error;
  r.error = std::move(message);
  return r;
}

// X W for X of `rows` rows of width d and W d x d, in T. Each element is
// the dot product accumulated in index order, as a plain loop over e would
// give; the loops run over e then c so the innermost one is contiguous and
// vectorises without changing any element's order of additions. W's
// entries are converted as they are read: no copy of W per call.
template <typename T, typename In>
std::vector<T> project(const std::vector<In>& x, const std::vector<double>& w, int64_t rows, int64_t d) {
  std::vector<T> y(static_cast<size_t>(rows * d), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    T* yr = y.data() + r * d;
    for (int64_t e = 0; e < d; ++e) {
      const T xe = static_cast<T>(x[static_cast<size_t>(r * d + e)]);
      const double* we = w.data() + e * d;
      for (int64_t c = 0; c < d; ++c) yr[c] += xe * static_cast<T>(we[c]);
    }
  }
  return y;
}

// The step in T, for a call already checked for consistent shapes.
template <typename T>
LayerResult run_in(const LayerWeights& w, const LayerInput& x, const AttentionCore& core,
                   HeadIndex split) {
  const int64_t d = w.d_model, heads = x.heads, dk = d / heads;
  std::vector<T> q = project<T>(x.x_q, w.w_q, x.batch * x.tq, d);
  std::vector<T> k = project<T>(x.x_kv, w.w_k, x.batch * x.tk, d);
  std::vector<T> v = project<T>(x.x_kv, w.w_v, x.batch * x.tk, d);

  Problem p = Problem::zeros(x.dtype, x.batch, heads, heads, x.tq, x.tk, dk, dk);
  for (int64_t b = 0; b < x.batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < dk; ++c) {
        for (int64_t t = 0; t < x.tq; ++t) p.q.at(b, h, t, c) = q[split(b, h, t, c, x.tq, heads, dk)];
        for (int64_t t = 0; t < x.tk; ++t) {
          p.k.at(b, h, t, c) = k[split(b, h, t, c, x.tk, heads, dk)];
          p.v.at(b, h, t, c) = v[split(b, h, t, c, x.tk, heads, dk)];
        }
      }
  // Copied into the problem: freed before the core adds its own buffers.
  q = {};
  k = {};
  v = {};
  p.key_valid = x.key_valid;
  p.causal = x.causal;
  p.align = x.align;
  const ForwardResult o = core(p);
  if (o.status != Status::ok) {
    LayerResult r;
    r.status = o.status;
    r.error = o.error;
    return r;
  }

  // The heads merged back into B x Tq x d_model, then the output projection.
  std::vector<T> merged(static_cast<size_t>(x.batch * x.tq * d), T(0));
  for (int64_t b = 0; b < x.batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < x.tq; ++t)
        for (int64_t c = 0; c < dk; ++c)
          merged[split(b, h, t, c, x.tq, heads, dk)] = static_cast<T>(o.out[out_index(p, b, h, t, c)]);
  const std::vector<T> y = project<T>(merged, w.w_o, x.batch * x.tq, d);
  LayerResult r;
  r.y.assign(y.begin(), y.end());
  return r;
}

}  // namespace

size_t split_heads(int64_t b, int64_t h, int64_t t, int64_t c, int64_t tokens, int64_t heads,
                   int64_t dk) {
  return static_cast<size_t>(((b * tokens + t) * heads + h) * dk + c);
}

LayerResult run_multi_head(const LayerWeights& w, const LayerInput& x, const AttentionCore& core,
                           HeadIndex split) {
  if (x.dtype != DType::f32 && x.dtype != DType::f64) {
    LayerResult r;
    r.status = Status::unsupported;
    return r;
  }
  const int64_t d = w.d_model;
  const auto dd = static_cast<size_t>(d * d);
  if (d <= 0 || x.heads <= 0 || d % x.heads != 0) {
    return layer_error("d_model " + std::to_string(d) + " is not a positive multiple of heads " +
                       std::to_string(x.heads));
  }
  if (w.w_q.size() != dd || w.w_k.size() != dd || w.w_v.size() != dd || w.w_o.size() != dd) {
    return layer_error("every projection must have d_model^2 = " + std::to_string(dd) + " elements");
  }
  if (x.x_q.size() != static_cast<size_t>(x.batch * x.tq * d) ||
      x.x_kv.size() != static_cast<size_t>(x.batch * x.tk * d)) {
    return layer_error("x_q must be batch x tq x d_model and x_kv batch x tk x d_model");
  }
  return x.dtype == DType::f64 ? run_in<double>(w, x, core, split) : run_in<float>(w, x, core, split);
}

int64_t MultiHeadLayer::parameter_count(int64_t d_model, int64_t heads) const {
  (void)heads;  // the heads split W's columns; they add no parameters
  return 4 * d_model * d_model;
}

LayerResult MultiHeadLayer::run(const LayerWeights& w, const LayerInput& x) const {
  return run_multi_head(w, x, core_, split_heads);
}

}  // namespace attncheck
