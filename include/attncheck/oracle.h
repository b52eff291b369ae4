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
#include <utility>
#include <vector>

#include "attncheck/problem.h"

namespace attncheck {

/// A reported value whose correct rounding could not be decided: it is
/// still the nearest double to a high-precision value, but not proven.
struct UncertifiedValue {
  std::string array;           ///< "out", "weights", "lse", "dq", "dk", "dv", "dsink"
  /// Its logical multi-index: (b, h, i, c), (b, h, i, j), (b, h, i),
  /// (b, g, j, c), or (h) for dsink; b is p's sequence for varlen problems.
  std::vector<int64_t> index;
};

/// The oracle's answer for one problem, every array contiguous. Besides the
/// results it keeps the per-element and per-row quantities the tolerance of
/// SPEC section 4 is computed from.
///
/// Version 2 (SPEC 1.1):
///  - Sinks: Z_i = exp(sink_h) + sum_allowed exp(s_ij), a_ij = exp(s_ij) /
///    Z_i, lse = log Z_i. A row without an allowed key is then not empty:
///    o = 0, its weights 0, lse = sink_h exactly, row_max = sink_h,
///    row_sum = 1, row_allowed = 0, row_empty = 0, not in empty_rows.
///    row_max and row_sum count the sink as a key (m = max over the scores
///    and the sink).
///  - Descales: every value is of the LOGICAL problem, inputs stored *
///    descale (q_descale, k_descale, v_descale), folded exactly: scores
///    (scale qd kd) q . k, o = vd sum_j a_j v_j; abs_dot is |scale qd kd|
///    sum |q k| of the stored values. The gradients are with respect to the
///    logical inputs (dQ = scale kd sum_j dS_j k_j, dK = scale qd sum_i dS_ij
///    q_i, dV = sum_i a_ij dO_i, dA = vd dO . v): a caller that wants the
///    gradient of a stored input multiplies by its descale.
///  - Varlen (p.varlen()): each sequence is solved as sequence_problem(p, b)
///    (sequences without queries skipped) and the result is assembled in
///    p's layout: out [total_q][heads][dv] and lse [heads][total_q] with
///    packed queries (out_index / row_index), [b][h][tq][..] otherwise;
///    the row diagnostics (row_max, row_sum, row_allowed, row_empty) like
///    lse; weights, scores and abs_dot only without packed queries, [b][h]
///    [tq][tk] with 0 past each sequence's keys; dq packed like q
///    ([total_q][heads][dk] or [b][h][tq][dk]), dk / dv packed like k
///    ([total_k][kv_heads][d] or [b][kv_h][tk][d]); empty_rows and
///    uncertified indices as (b, ...) of p. `sequences` keeps each
///    sequence's own dense result (empty for tq_b = 0), for the tolerances.
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
  /// [heads]: d loss / d sink_h = sum over all rows (every batch entry or
  /// sequence) of dS_sink = -a_sink sum_j a_j dA_j, correctly rounded
  /// (the sum is taken exactly, then rounded once) or listed in
  /// uncertified as ("dsink", {h}). Empty without a sink or without dout.
  std::vector<double> dsink;
  /// Varlen problems only: sequence b's dense result (oracle of
  /// sequence_problem(p, b), dsink aside), empty for a sequence without
  /// queries. Empty for dense problems.
  std::vector<OracleResult> sequences;
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

/// The InputError oracle() and check_oracle_inputs throw for a NaN or an
/// infinity that reaches the result; `field` is the problem's field that
/// holds it ("q", "k", "v", "bias", "dout", "scale", "sink", "descale"),
/// so that a reader of a file can name the file's field.
class NonFiniteInput : public InputError {
 public:
  NonFiniteInput(std::string field, const std::string& what)
      : InputError(what), field(std::move(field)) {}
  std::string field;
};

/// Throws NonFiniteInput as oracle() would, without computing anything: the
/// input rule every reader of a problem for judging applies (attncheck
/// oracle and replay alike), so that a case the oracle refuses is never
/// judged against an implementation.
void check_oracle_inputs(const Problem& p);

/// Why enclose() does not take p, or nullopt: it covers version 1 forward
/// problems without a softcap (the tanh would need its own bounded
/// implementation) and without gradients, with sinks, descales and any
/// input formats (SPEC 1.1); varlen (packed or paged) problems are reported
/// unsupported: the certified oracle() serves them.
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
