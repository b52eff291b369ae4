#pragma once
// Per-element tolerances of SPEC section 4, from oracle quantities and an
// implementation's declared precision traits. Every coefficient is derived
// in tolerance.cpp beside the line that uses it.

#include <cstdint>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/oracle.h"

namespace attncheck {

/// Tolerances for one problem, laid out like the oracle's arrays.
struct Tolerances {
  std::vector<double> out;      ///< [b][h][tq][dv]
  std::vector<double> weights;  ///< [b][h][tq][tk]
  std::vector<double> lse;      ///< [b][h][tq]
  /// 1 where a row is beyond the first-order analysis (sum a_j D_j, eps or
  /// gamma_n above kFirstOrderLimit, or a score that may overflow the s_cast
  /// format): its elements must not be judged.
  std::vector<uint8_t> ill_conditioned;
  int64_t ill_conditioned_rows = 0;
};

/// Beyond this size of a first-order term, second-order terms are no longer
/// covered by kSecondOrderFactor and the bound is not trusted.
inline constexpr double kFirstOrderLimit = 0.1;

/// What every first-order bound (tolerance.cpp, grad_tolerance.cpp) is
/// multiplied by to cover its second-order remainder: a product of
/// (1 + delta) factors of two nested perturbations (logits, then
/// normalisation) whose first-order part x stays below kFirstOrderLimit is
/// at most 1 / (1 - x)^2 <= 1 / (1 - 0.1)^2 = 1.234... < 1.25 times x.
inline constexpr double kSecondOrderFactor = 1.25;
static_assert(1 / ((1 - kFirstOrderLimit) * (1 - kFirstOrderLimit)) < kSecondOrderFactor);

/// The tolerance of every output, weight and lse element of `p` for an
/// implementation with traits `t` producing outputs in `p.dtype`.
Tolerances tolerances(const Problem& p, const OracleResult& o,
                      const PrecisionTraits& t);

/// gamma_n = n u / (1 - n u) (Higham's bound for n roundings), +inf when
/// n u >= 1.
double gamma(double n, double u);

}  // namespace attncheck

namespace attncheck {

/// Tolerances of the gradients of one problem, laid out like the oracle's
/// dq, dk, dv (SPEC section 4, derived in grad_tolerance.cpp).
struct GradTolerances {
  std::vector<double> dq;  ///< [b][h][tq][dk]
  std::vector<double> dk;  ///< [b][kv_h][tk][dk]
  std::vector<double> dv;  ///< [b][kv_h][tk][dv]
  /// 1 per row [b][h][tq] beyond the first-order analysis (the forward's
  /// conditions, or the gamma of a gradient sum above kFirstOrderLimit):
  /// neither its dQ nor the dK / dV of its K/V head may be judged.
  std::vector<uint8_t> ill_conditioned;
  int64_t ill_conditioned_rows = 0;
};

/// The tolerance of every dQ, dK and dV element of `p` for p.dout, for an
/// implementation with traits `t` producing gradients in `p.dtype`. `o` is
/// the oracle's result for `p`, gradients included. Throws
/// std::invalid_argument when `p` has no dout of the right size or `o` has
/// no gradients.
GradTolerances grad_tolerances(const Problem& p, const OracleResult& o,
                               const PrecisionTraits& t);

}  // namespace attncheck
