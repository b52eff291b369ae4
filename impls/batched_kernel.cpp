#include "batched_kernel.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "impl_common.h"

namespace attncheck::impls {
namespace {

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The harness only sends declared features; refusing the rest keeps a
// direct caller from getting a silently wrong answer.
bool outside_features(const Problem& p) {
  return p.kv_heads != p.heads || p.mask || p.bias || p.softcap != 0 || p.window_left >= 0 ||
         p.window_right >= 0;
}

// Q, K, V of slice (b, h) converted to T.
template <typename T>
struct Slice {
  Matrix<T> q, k, v;
  Slice(const Problem& p, int64_t b, int64_t h) : q(p.tq, p.dk), k(p.tk, p.dk), v(p.tk, p.dv) {
    for (int64_t i = 0; i < p.tq; ++i)
      for (int64_t d = 0; d < p.dk; ++d) q(i, d) = static_cast<T>(p.q.at(b, h, i, d));
    for (int64_t j = 0; j < p.tk; ++j) {
      for (int64_t d = 0; d < p.dk; ++d) k(j, d) = static_cast<T>(p.k.at(b, h, j, d));
      for (int64_t d = 0; d < p.dv; ++d) v(j, d) = static_cast<T>(p.v.at(b, h, j, d));
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

}  // namespace

template <typename T>
ForwardResult batched_forward(const Problem& p) {
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
      const Matrix<T> o = a * x.v;
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t j = 0; j < p.tk; ++j)
          r.weights[weight_index(p, b, h, i, j)] = static_cast<double>(a(i, j));
        for (int64_t d = 0; d < p.dv; ++d)
          r.out[out_index(p, b, h, i, d)] = static_cast<double>(o(i, d));
      }
    }
  }
  return r;
}

template <typename T>
BackwardResult batched_backward(const Problem& p) {
  if (outside_features(p)) return backward_unsupported();
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  if (p.dout.size() != rows * static_cast<size_t>(p.dv)) {
    return backward_failure("dout has " + std::to_string(p.dout.size()) + " elements, expected " +
                            std::to_string(rows * static_cast<size_t>(p.dv)));
  }
  if (auto message = first_empty_row_error(p)) return backward_failure(*message);
  BackwardResult r;
  r.dq.resize(rows * static_cast<size_t>(p.dk));
  r.dk.resize(static_cast<size_t>(p.batch * p.heads * p.tk * p.dk));
  r.dv.resize(static_cast<size_t>(p.batch * p.heads * p.tk * p.dv));
  const T scale = static_cast<T>(p.scale);
  Matrix<T> dout(p.tq, p.dv);
  for (int64_t b = 0; b < p.batch; ++b) {
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
      Matrix<T> dk = ds.transpose() * x.q;
      dk *= scale;
      const Matrix<T> dv = a.transpose() * dout;
      // Without GQA the K/V head of h is h, so dK / dV index like dQ's slice.
      const auto slice = static_cast<size_t>(b * p.heads + h);
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d)
          r.dq[(slice * static_cast<size_t>(p.tq) + static_cast<size_t>(i)) *
                   static_cast<size_t>(p.dk) +
               static_cast<size_t>(d)] = static_cast<double>(dq(i, d));
      for (int64_t j = 0; j < p.tk; ++j) {
        const size_t kv_row = slice * static_cast<size_t>(p.tk) + static_cast<size_t>(j);
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
