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
  /// gamma_n above kFirstOrderLimit): its elements must not be judged.
  std::vector<uint8_t> ill_conditioned;
  int64_t ill_conditioned_rows = 0;
};

/// Beyond this size of a first-order term, second-order terms are no longer
/// covered by the 1.25 factor and the bound is not trusted.
inline constexpr double kFirstOrderLimit = 0.1;

/// The tolerance of every output, weight and lse element of `p` for an
/// implementation with traits `t` producing outputs in `p.dtype`.
Tolerances tolerances(const Problem& p, const OracleResult& o,
                      const PrecisionTraits& t);

/// gamma_n = n u / (1 - n u) (Higham's bound for n roundings), +inf when
/// n u >= 1.
double gamma(double n, double u);

}  // namespace attncheck
