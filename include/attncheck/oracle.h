#pragma once
// The high-precision reference (SPEC section 1): every reported double is
// proven to be the correctly rounded value of the exact result (double-double
// with rigorous error bounds, then MPFR interval arithmetic from exact
// scores at 128-2400 bits, exact rational cases and gradients, midpoint
// ties settled by irrationality), or listed as uncertified.
// The argument is in oracle/oracle.cpp, fast.cpp and exact.cpp.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/problem.h"

namespace attncheck {

/// A reported value whose correct rounding could not be decided: it is
/// still the nearest double to a high-precision value, but not proven.
struct UncertifiedValue {
  std::string array;           ///< "out", "weights", "lse", "dq", "dk", "dv"
  std::vector<int64_t> index;  ///< its multi-index in that array
};

/// The oracle's answer for one problem, every array contiguous. Besides the
/// results it keeps the per-element and per-row quantities the tolerance of
/// SPEC section 4 is computed from.
struct OracleResult {
  std::vector<double> out;      ///< [b][h][tq][dv]; 0 on empty rows
  std::vector<double> weights;  ///< [b][h][tq][tk]; exactly 0 where disallowed
  std::vector<double> lse;      ///< [b][h][tq]; -inf on empty rows
  std::vector<double> scores;   ///< s_ij [b][h][tq][tk] after softcap and bias
                                ///< (also at disallowed keys)
  std::vector<double> abs_dot;  ///< S_ij = |scale| * sum_t |q_it k_jt|
  std::vector<double> row_max;  ///< m = max over allowed s_ij; -inf if empty
  std::vector<double> row_sum;  ///< l = sum over allowed exp(s_ij - m); 0 if empty
  std::vector<int64_t> row_allowed;  ///< n = number of allowed keys
  std::vector<uint8_t> row_empty;    ///< 1 where the row has no allowed key
  std::vector<std::array<int64_t, 3>> empty_rows;  ///< [b, h, i] of empty rows
  /// Gradients for p.dout (empty when the problem has no dout):
  std::vector<double> dq;  ///< [b][h][tq][dk]
  std::vector<double> dk;  ///< [b][kv_h][tk][dk]
  std::vector<double> dv;  ///< [b][kv_h][tk][dv]
  /// Values not proven correctly rounded (never guessed silently).
  std::vector<UncertifiedValue> uncertified;

  /// Which reference this is (SPEC 4: reports say which tier judged).
  /// The certified oracle leaves the radii empty: each value is the
  /// correctly rounded result. An enclosure (enclose()) sets them: the exact
  /// value lies within value +- radius, radius 0 where the value is exact
  /// (masked weights, empty rows); a comparison charges |got - value| +
  /// radius, i.e. max(|got - lo|, |got - hi|).
  enum class Tier { certified, enclosure } tier = Tier::certified;
  std::vector<double> out_radius;      ///< parallel to out (enclosure only)
  std::vector<double> weights_radius;  ///< parallel to weights (enclosure only)
  std::vector<double> lse_radius;      ///< parallel to lse (enclosure only)
};

/// "certified" or "enclosure".
const char* tier_name(OracleResult::Tier t);

/// Precision of the oracle's arithmetic, in bits (>= 128; 64 bits is not
/// enough for long rows).
inline constexpr unsigned kOracleBits = 128;

/// Computes the exact result of `p`, each of out, weights, lse (and dq, dk,
/// dv when p.dout is set) correctly rounded to nearest, or listed in
/// `uncertified`. Empty rows are flagged, never an error; they contribute
/// nothing to the gradients. Throws InputError naming the element when a
/// NaN or infinity reaches the result (an input some row can see: there is
/// no exact result to report); non-finite values no row can see are fine.
OracleResult oracle(const Problem& p);

/// Why enclose() does not take p, or nullopt: it covers version 1 forward
/// problems without a softcap (the tanh would need its own bounded
/// implementation) and without gradients.
std::optional<std::string> enclosure_unsupported(const Problem& p);

/// SPEC 4's double tier for real sizes: out, weights and lse as intervals
/// value +- radius proven to contain the exact result, computed per (batch,
/// head) with BLAS-speed products (Eigen's GEMM, single-threaded) and
/// a-priori bounds; see oracle/enclosure.cpp for the argument. The
/// diagnostic fields the tolerances read (scores, abs_dot, row_max,
/// row_sum, row_allowed, row_empty, empty_rows) are filled from the same
/// computation. Requires !enclosure_unsupported(p); throws InputError like
/// oracle() when a NaN or an infinity reaches the result.
OracleResult enclose(const Problem& p);

/// The relative error bound of the enclosure's own exp (exposed for its
/// test): |bounded_exp(x) - e^x| <= kBoundedExpError e^x for x in
/// [-745, 709], plus 2^-1074 absolute where the result is subnormal.
inline constexpr double kBoundedExpError = 0x1p-40;
double bounded_exp(double x);

}  // namespace attncheck
