#include "batched_kernel.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "impl_common.h"

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

}  // namespace

template <typename T>
ForwardResult batched_forward(const Problem& p) {
  return forward<T>(p, std::nullopt);
}

ForwardResult batched_forward_16(const Problem& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) return ForwardResult::unsupported();
  return forward<float>(p, p.dtype);
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

template ForwardResult batched_forward<double>(const Problem&);
template ForwardResult batched_forward<float>(const Problem&);
template BackwardResult batched_backward<double>(const Problem&);
template BackwardResult batched_backward<float>(const Problem&);

}  // namespace attncheck::impls
