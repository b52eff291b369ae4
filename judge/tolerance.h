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
  /// Like lse: the tolerance of the sink's weight a_sink = exp(sink_h -
  /// lse) of each row (never an output; the backward's dsink bound uses
  /// it). Empty without a sink, and for varlen problems.
  std::vector<double> sink_weight;
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
/// implementation with traits `t` producing outputs in `p.dtype`, laid out
/// like `o` = oracle(p). Version 2 problems (SPEC 1.1) too: sinks,
/// descales, fp8 formats, and varlen problems, judged sequence by sequence
/// from o.sequences and assembled in p's layout (packed out / lse, no
/// weights with packed queries). Throws std::invalid_argument for a varlen
/// p whose `o` lacks the per-sequence results.
///
/// The precision is taken by stage (SPEC 4.1): Q's rounding, the q.k
/// sums, the softmax, P's cast and the P.V accumulator each in their
/// declared format; a stage not declared is t.accum, so a declaration
/// without stages gets version 1's tolerance exactly.
///
/// `at_limit`: T^L of SPEC 2 (AsAccurateAsBaseline) instead: every
/// first-order quantity above kFirstOrderLimit (sum_j a_j D_j, eps,
/// gamma_{dk+2}, gamma_n of l, and the P.V accumulator's gamma_n + r u_pv)
/// taken at the limit, and a row is then ill-conditioned only where a
/// score or Q element overflows its format.
Tolerances tolerances(const Problem& p, const OracleResult& o,
                      const PrecisionTraits& t, bool at_limit = false);

/// Whether tolerances(p, oracle(p), t) marks some row ill-conditioned by
/// its number of allowed keys alone, whatever the values: gamma_n (or the
/// exponentials' error eps, which grows with an online softmax's blocks)
/// above kFirstOrderLimit; a bf16 accumulation (u = 2^-8) is beyond from
/// 24 keys. A judge at real sizes asks this before calling the
/// implementation, whose result could not be judged (CaseContext::screen).
/// False for varlen problems (their sequences are not looked at).
bool beyond_first_order_by_length(const Problem& p, const PrecisionTraits& t);

/// Whether p's inputs overflow a format the declared arithmetic rounds them
/// to: a logical Q element past the q_cast format's largest finite, or a
/// score that may round to an infinity in the s_cast format. Such rows are
/// beyond the declared precision (tolerances() marks them), and a
/// non-finite output there is the declared arithmetic's, not a failure.
bool overflows_declared_formats(const Problem& p, const PrecisionTraits& t);

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
  /// [heads]: the tolerance of dsink (empty without a sink); +infinity
  /// (not judged) for a head with a row beyond the first-order analysis.
  std::vector<double> dsink;
  /// 1 per row [b][h][tq] beyond the first-order analysis (the forward's
  /// conditions, or the gamma of a gradient sum above kFirstOrderLimit):
  /// neither its dQ nor the dK / dV of its K/V head may be judged.
  std::vector<uint8_t> ill_conditioned;
  int64_t ill_conditioned_rows = 0;
};

/// The tolerance of every dQ, dK and dV element of `p` for p.dout, for an
/// implementation with traits `t` producing gradients in `p.dtype`. `o` is
/// the oracle's result for `p`, gradients included. Gradients are of the
/// logical inputs (oracle.h); varlen problems are laid out like the
/// oracle's (dq packed like q, dk / dv like k), dsink [heads]. Throws
/// std::invalid_argument when `p` has no dout of the right size or `o` has
/// no gradients.
GradTolerances grad_tolerances(const Problem& p, const OracleResult& o,
                               const PrecisionTraits& t);

}  // namespace attncheck
