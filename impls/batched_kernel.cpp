#include "batched_kernel.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "impl_common.h"

namespace attncheck::impls {

template <typename T>
ForwardResult batched_forward(const Problem& p) {
  // The harness only sends declared features; refusing the rest keeps a
  // direct caller from getting a silently wrong answer.
  if (p.kv_heads != p.heads || p.mask || p.bias || p.softcap != 0 ||
      p.window_left >= 0 || p.window_right >= 0) {
    return ForwardResult::unsupported();
  }
  if (auto message = first_empty_row_error(p)) {
    return ForwardResult::failure(*message);
  }
  using Matrix =
      Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Column = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.resize(rows * static_cast<size_t>(p.dv));
  r.weights.resize(rows * static_cast<size_t>(p.tk));
  const T scale = static_cast<T>(p.scale);
  Matrix q(p.tq, p.dk), k(p.tk, p.dk), v(p.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d)
          q(i, d) = static_cast<T>(p.q.at(b, h, i, d));
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d)
          k(j, d) = static_cast<T>(p.k.at(b, h, j, d));
        for (int64_t d = 0; d < p.dv; ++d)
          v(j, d) = static_cast<T>(p.v.at(b, h, j, d));
      }
      // Scaling after the product is evaluated: as one expression Eigen may
      // fold the scalar into an operand, which rounds differently from
      // scale * (q . k).
      Matrix s = q * k.transpose();
      s *= scale;
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j)
          if (!p.allowed(b, h, i, j)) {
            s(i, j) = -std::numeric_limits<T>::infinity();
          }
      const Column m = s.rowwise().maxCoeff();
      // std::exp rather than Eigen's vectorised exp, whose error bound is
      // not the 1 ulp the precision traits declare.
      Matrix e = (s.colwise() - m).unaryExpr([](T x) { return std::exp(x); });
      const Column l = e.rowwise().sum();
      const Matrix a = e.array().colwise() / l.array();
      const Matrix o = a * v;
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

template ForwardResult batched_forward<double>(const Problem&);
template ForwardResult batched_forward<float>(const Problem&);

}  // namespace attncheck::impls
