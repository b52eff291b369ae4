#pragma once
// Internals shared by the oracle's files: which reported values are already
// proven correctly rounded, and the two ways of proving them (fast.cpp,
// exact.cpp). See oracle.cpp for the overall argument.

#include <cstdint>
#include <memory>
#include <vector>

#include "attncheck/oracle.h"

namespace attncheck::oracle_detail {

/// One flag per reported value, parallel to OracleResult's arrays: 1 once
/// the value stored there is proven to be the correctly rounded result.
struct Decided {
  std::vector<uint8_t> out, weights, lse, dq, dk, dv;
};

/// Index of dK / dV element (b, g, j, c) in a contiguous [b][kv_h][tk][n]
/// array with n columns.
inline size_t kv_index(const Problem& p, int64_t b, int64_t g, int64_t j,
                       int64_t c, int64_t n) {
  return static_cast<size_t>(((b * p.kv_heads + g) * p.tk + j) * n + c);
}

/// Sizes r's forward arrays (out, weights, lse) and diagnostics (scores,
/// abs_dot, row_max, row_sum, row_allowed, row_empty) for the dense
/// problem p, each at the value of a row without keys: 0, lse and row_max
/// -inf.
void size_forward(const Problem& p, OracleResult& r);

/// Throws InputError naming the first NaN or infinity that reaches the
/// result (an input some row can see); values no row can see are allowed.
void check_finite_inputs(const Problem& p);

/// Double-double fast path for the K/V group (b, g): fills every value of
/// the group and the diagnostic fields, marking as decided each value whose
/// rigorous error bound proves its rounding. Returns false, touching
/// nothing, when the inputs leave the range where its bounds hold.
bool fast_group(const Problem& p, int64_t b, int64_t g, OracleResult& r,
                Decided& d);

/// dsink's per-head sums at the exact path's first precision (128 bits),
/// collected while exact_group runs every row of a group there anyway (it
/// does whenever the problem has gradients), so that exact_dsink starts
/// from them instead of recomputing every row. `complete` stays true only
/// if every group of every part added its rows.
struct DsinkSums;
struct DsinkSumsDeleter {
  void operator()(DsinkSums* s) const;
};
using DsinkSumsPtr = std::unique_ptr<DsinkSums, DsinkSumsDeleter>;
DsinkSumsPtr make_dsink_sums(int64_t heads);

/// MPFR interval path for the group (b, g): decides the values not yet
/// decided, at 128, 256, 512 and finally 2400 bits; what is still undecided
/// is appended to r.uncertified. With `fill_diagnostics` it also writes
/// scores, abs_dot, row_max and row_sum of the group. With `sums` (a
/// problem with a sink and a dout) it adds the group's dsink terms at 128
/// bits to them.
void exact_group(const Problem& p, int64_t b, int64_t g, OracleResult& r,
                 Decided& d, bool fill_diagnostics, DsinkSums* sums = nullptr);

/// dsink_h = sum over the rows of every problem in `parts` of dS_sink =
/// -a_sink sum_j a_j dA_j, for each of the `heads` query heads, each sum
/// taken exactly in MPFR intervals (at 128, 256, 512 and 2400 bits) and
/// rounded once: decided[h] = 1 where that rounding is proven. `parts` are
/// dense problems with a sink and a dout: the problem itself, or the
/// sequences of a varlen problem (whose dsink sums over all of them).
/// `sums`, when complete, stands for the 128-bit pass.
void exact_dsink(const std::vector<const Problem*>& parts, int64_t heads,
                 std::vector<double>& dsink, std::vector<uint8_t>& decided,
                 const DsinkSums* sums = nullptr);

}  // namespace attncheck::oracle_detail
