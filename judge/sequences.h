#pragma once
// Varlen problems judged sequence by sequence (SPEC 4, tolerance.cpp's
// "Varlen problems"): sequence b is the dense problem sequence_problem(p,
// b), judged against the oracle's o.sequences[b], and what is computed for
// it is placed back into p's layout (the oracle's), so that compare works
// element by element on the assembled arrays. The forward's tolerances
// and the gradients' both assemble through this one placement.

#include <cstdint>
#include <functional>
#include <vector>

#include "attncheck/oracle.h"
#include "attncheck/problem.h"

namespace attncheck {

/// Where the elements of sequence b of a varlen `p` go among p's arrays,
/// from those of its dense `sequence` = sequence_problem(p, b): each
/// method copies the sequence's values of one array into p's, leaving the
/// other sequences' elements alone.
class SequencePlacement {
 public:
  SequencePlacement(const Problem& p, const Problem& sequence, int64_t b);

  /// One value per query row, laid out like lse ([b][h][tq]; packed
  /// queries: [heads][total_q]).
  void rows(std::vector<double>& to, const std::vector<double>& from) const;
  void rows(std::vector<uint8_t>& to, const std::vector<uint8_t>& from) const;
  /// `width` values per query row, laid out like q (out: dv, dq: dk).
  void query_rows(std::vector<double>& to, const std::vector<double>& from, int64_t width) const;
  /// One value per score, laid out like the weights ([b][h][tq][tk]).
  void scores(std::vector<double>& to, const std::vector<double>& from) const;
  /// `width` values per key row, laid out like k (dk: dk, dv: dv).
  void key_rows(std::vector<double>& to, const std::vector<double>& from, int64_t width) const;

 private:
  template <typename T>
  void copy_rows(std::vector<T>& to, const std::vector<T>& from) const;

  const Problem& p_;
  const Problem& sequence_;
  int64_t b_;
  int64_t tq_, tk_;  ///< the sequence's own lengths (tk_ may be 0)
};

/// Calls `judge(sequence_problem(p, b), o.sequences[b], placement)` for
/// each sequence b of the varlen `p` that has queries, in order (one
/// without queries has nothing to judge). `o` must hold the per-sequence
/// results (the caller checks, with its own message).
void for_each_sequence(const Problem& p, const OracleResult& o,
                       const std::function<void(const Problem&, const OracleResult&,
                                                const SequencePlacement&)>& judge);

}  // namespace attncheck
