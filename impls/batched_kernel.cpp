#include "batched_kernel.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "impl_common.h"
#include "kernels_simd.h"

namespace attncheck::impls {
namespace {

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The harness only sends declared features; refusing the rest keeps a
// direct caller from getting a silently wrong answer.
bool outside_features(const Problem& p) {
  return p.mask || p.bias || p.softcap != 0 || p.window_left >= 0 || p.window_right >= 0;
}

// Q of slice (b, h) and K, V of its K/V head, converted to T.
template <typename T>
struct Slice {
  Matrix<T> q, k, v;
  Slice(const Problem& p, int64_t b, int64_t h) : q(p.tq, p.dk), k(p.tk, p.dk), v(p.tk, p.dv) {
    const int64_t g = p.kv_head(h);
    for (int64_t i = 0; i < p.tq; ++i)
      for (int64_t d = 0; d < p.dk; ++d) q(i, d) = static_cast<T>(p.q.at(b, h, i, d));
    for (int64_t j = 0; j < p.tk; ++j) {
      for (int64_t d = 0; d < p.dk; ++d) k(j, d) = static_cast<T>(p.k.at(b, g, j, d));
      for (int64_t d = 0; d < p.dv; ++d) v(j, d) = static_cast<T>(p.v.at(b, g, j, d));
    }
  }
};

// The weights P of slice (b, h): S = (Q K^T) * scale, disallowed scores
// -inf, a row-wise stable softmax.
template <typename T>
Matrix<T> weights(const Problem& p, int64_t b, int64_t h, const Slice<T>& x) {
  using Column = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  // Scaling after the product is evaluated: as one expression Eigen may
  // fold the scalar into an operand, which rounds differently from
  // scale * (q . k).
  Matrix<T> s = x.q * x.k.transpose();
  s *= static_cast<T>(p.scale);
  for (int64_t i = 0; i < p.tq; ++i)
    for (int64_t j = 0; j < p.tk; ++j)
      if (!p.allowed(b, h, i, j)) s(i, j) = -std::numeric_limits<T>::infinity();
  const Column m = s.rowwise().maxCoeff();
  // std::exp rather than Eigen's vectorised exp, whose error bound is
  // not the 1 ulp the precision traits declare.
  const Matrix<T> e = (s.colwise() - m).unaryExpr([](T v) { return std::exp(v); });
  const Column l = e.rowwise().sum();
  return e.array().colwise() / l.array();
}

// The forward pass in T; with `p_cast`, P is rounded to that format before
// O = P V. O is rounded to p.dtype (exact when T is the dtype's own type).
template <typename T>
ForwardResult forward(const Problem& p, std::optional<DType> p_cast) {
  if (outside_features(p)) return ForwardResult::unsupported();
  if (auto message = first_empty_row_error(p)) {
    return ForwardResult::failure(*message);
  }
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.resize(rows * static_cast<size_t>(p.dv));
  r.weights.resize(rows * static_cast<size_t>(p.tk));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const Slice<T> x(p, b, h);
      const Matrix<T> a = weights(p, b, h, x);
      const auto cast = [&](T w) {
        return static_cast<T>(round_to(*p_cast, static_cast<double>(w)));
      };
      const Matrix<T> o = p_cast ? Matrix<T>(a.unaryExpr(cast) * x.v) : Matrix<T>(a * x.v);
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t j = 0; j < p.tk; ++j)
          r.weights[weight_index(p, b, h, i, j)] = static_cast<double>(a(i, j));
        for (int64_t d = 0; d < p.dv; ++d)
          r.out[out_index(p, b, h, i, d)] = round_to(p.dtype, static_cast<double>(o(i, d)));
      }
    }
  }
  return r;
}

// An operand of slice (b, h) (or of K/V head h) as contiguous float rows.
std::vector<float> rows_of(const Tensor& t, int64_t b, int64_t h, int64_t n, int64_t d) {
  std::vector<float> out(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c)
      out[static_cast<size_t>(i * d + c)] = static_cast<float>(t.at(b, h, i, c));
  return out;
}

// forward<float> with kernels_simd.h's blocks: the same steps (S = Q K^T,
// then times scale; -inf at disallowed keys; row max, exp(s - m), row sum,
// division; O = cast(P) V), each product a packed float GEMM and exp the
// vectorised one. Q, K and V are converted to float once per slice, the
// mask is applied per row from its two constraints, and each K/V head is
// packed once per batch entry for its whole GQA group.
template <>
ForwardResult forward<float>(const Problem& p, std::optional<DType> p_cast) {
  if (outside_features(p)) return ForwardResult::unsupported();
  if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  const int64_t tq = p.tq, tk = p.tk;
  const auto rows = static_cast<size_t>(p.batch * p.heads * tq);
  ForwardResult r;
  r.out.resize(rows * static_cast<size_t>(p.dv));
  r.weights.resize(rows * static_cast<size_t>(tk));
  const float scale = static_cast<float>(p.scale);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> s(static_cast<size_t>(tq * tk)), o(static_cast<size_t>(tq * p.dv));
  std::vector<float> cast_p;
  simd::Packed kt, v;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t packed_head = -1;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      if (g != packed_head) {
        simd::pack_transposed(rows_of(p.k, b, g, tk, p.dk).data(), tk, p.dk, p.dk, kt);
        simd::pack(rows_of(p.v, b, g, tk, p.dv).data(), tk, p.dv, p.dv, v);
        packed_head = g;
      }
      const std::vector<float> q = rows_of(p.q, b, h, tq, p.dk);
      simd::gemm(tq, tk, p.dk, q.data(), p.dk, kt, 0, 0, s.data(), tk, false);
      for (int64_t i = 0; i < tq; ++i) {
        float* row = s.data() + i * tk;
        // Scaled after the product, as scale * (q . k) is rounded.
        for (int64_t j = 0; j < tk; ++j) row[j] *= scale;
        if (!p.key_valid.empty()) {
          const uint8_t* valid = p.key_valid.data() + b * tk;
          for (int64_t j = 0; j < tk; ++j)
            if (!valid[j]) row[j] = minus_inf;
        }
        if (p.causal) {
          for (int64_t j = std::max<int64_t>(0, p.position(i) + 1); j < tk; ++j) row[j] = minus_inf;
        }
        const float m = simd::max_of(row, tk);
        simd::exp_shifted(row, tk, m);
        const float l = simd::sum_of(row, tk);
        double* w = r.weights.data() + weight_index(p, b, h, i, 0);
        for (int64_t j = 0; j < tk; ++j) {
          row[j] /= l;
          w[j] = static_cast<double>(row[j]);
        }
      }
      const float* pv = s.data();
      if (p_cast) {
        cast_p.resize(s.size());
        for (size_t k = 0; k < s.size(); ++k)
          cast_p[k] = static_cast<float>(round_to(*p_cast, static_cast<double>(s[k])));
        pv = cast_p.data();
      }
      simd::gemm(tq, p.dv, tk, pv, tk, v, 0, 0, o.data(), p.dv, false);
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d)
          r.out[out_index(p, b, h, i, d)] =
              round_to(p.dtype, static_cast<double>(o[static_cast<size_t>(i * p.dv + d)]));
    }
  }
  return r;
}

}  // namespace

template <typename T>
ForwardResult batched_forward(const Problem& p, int64_t* scores_computed) {
  ForwardResult r = forward<T>(p, std::nullopt);
  if (scores_computed) *scores_computed = r.status == Status::ok ? p.score_elements() : 0;
  return r;
}

ForwardResult batched_forward_16(const Problem& p, int64_t* scores_computed) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) return ForwardResult::unsupported();
  ForwardResult r = forward<float>(p, p.dtype);
  if (scores_computed) *scores_computed = r.status == Status::ok ? p.score_elements() : 0;
  return r;
}

template <typename T>
BackwardResult batched_backward(const Problem& p) {
  if (outside_features(p)) return BackwardResult::unsupported();
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  if (p.dout.size() != rows * static_cast<size_t>(p.dv)) {
    return BackwardResult::failure("dout has " + std::to_string(p.dout.size()) + " elements, expected " +
                            std::to_string(rows * static_cast<size_t>(p.dv)));
  }
  if (auto message = first_empty_row_error(p)) return BackwardResult::failure(*message);
  BackwardResult r;
  r.dq.resize(rows * static_cast<size_t>(p.dk));
  r.dk.resize(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dk));
  r.dv.resize(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dv));
  const T scale = static_cast<T>(p.scale);
  Matrix<T> dout(p.tq, p.dv);
  // dK and dV of each K/V head sum over the query heads of its group.
  std::vector<Matrix<T>> dk_sum(static_cast<size_t>(p.kv_heads)), dv_sum(dk_sum.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (auto& m : dk_sum) m = Matrix<T>::Zero(p.tk, p.dk);
    for (auto& m : dv_sum) m = Matrix<T>::Zero(p.tk, p.dv);
    for (int64_t h = 0; h < p.heads; ++h) {
      const Slice<T> x(p, b, h);
      const Matrix<T> a = weights(p, b, h, x);
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d)
          dout(i, d) = static_cast<T>(p.dout[out_index(p, b, h, i, d)]);
      const Matrix<T> da = dout * x.v.transpose();
      const Eigen::Matrix<T, Eigen::Dynamic, 1> delta = a.cwiseProduct(da).rowwise().sum();
      // Disallowed keys have a = 0 exactly, so their dS is exactly 0.
      const Matrix<T> ds = a.cwiseProduct(da.colwise() - delta);
      Matrix<T> dq = ds * x.k;
      dq *= scale;
      const auto g = static_cast<size_t>(p.kv_head(h));
      dk_sum[g] += ds.transpose() * x.q;
      dv_sum[g] += a.transpose() * dout;
      const auto slice = static_cast<size_t>(b * p.heads + h);
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d)
          r.dq[(slice * static_cast<size_t>(p.tq) + static_cast<size_t>(i)) *
                   static_cast<size_t>(p.dk) +
               static_cast<size_t>(d)] = static_cast<double>(dq(i, d));
    }
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      const auto kv_slice = static_cast<size_t>(b * p.kv_heads + g);
      // scale multiplies the group's sum once, as the loop kernel does.
      const Matrix<T> dk = dk_sum[static_cast<size_t>(g)] * scale;
      const Matrix<T>& dv = dv_sum[static_cast<size_t>(g)];
      for (int64_t j = 0; j < p.tk; ++j) {
        const size_t kv_row = kv_slice * static_cast<size_t>(p.tk) + static_cast<size_t>(j);
        for (int64_t d = 0; d < p.dk; ++d)
          r.dk[kv_row * static_cast<size_t>(p.dk) + static_cast<size_t>(d)] =
              static_cast<double>(dk(j, d));
        for (int64_t d = 0; d < p.dv; ++d)
          r.dv[kv_row * static_cast<size_t>(p.dv) + static_cast<size_t>(d)] =
              static_cast<double>(dv(j, d));
      }
    }
  }
  return r;
}

template ForwardResult batched_forward<double>(const Problem&, int64_t*);
template ForwardResult batched_forward<float>(const Problem&, int64_t*);
template BackwardResult batched_backward<double>(const Problem&);
template BackwardResult batched_backward<float>(const Problem&);

}  // namespace attncheck::impls
