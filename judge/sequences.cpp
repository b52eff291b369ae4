#include "judge/sequences.h"

namespace attncheck {

SequencePlacement::SequencePlacement(const Problem& p, const Problem& sequence, int64_t b)
    : p_(p), sequence_(sequence), b_(b), tq_(p.seq_tq(b)), tk_(p.seq_tk(b)) {}

template <typename T>
void SequencePlacement::copy_rows(std::vector<T>& to, const std::vector<T>& from) const {
  for (int64_t h = 0; h < p_.heads; ++h)
    for (int64_t i = 0; i < tq_; ++i)
      to[row_index(p_, b_, h, i)] = from[row_index(sequence_, 0, h, i)];
}

void SequencePlacement::rows(std::vector<double>& to, const std::vector<double>& from) const {
  copy_rows(to, from);
}

void SequencePlacement::rows(std::vector<uint8_t>& to, const std::vector<uint8_t>& from) const {
  copy_rows(to, from);
}

void SequencePlacement::query_rows(std::vector<double>& to, const std::vector<double>& from,
                                   int64_t width) const {
  for (int64_t h = 0; h < p_.heads; ++h) {
    for (int64_t i = 0; i < tq_; ++i) {
      // Packed queries: row cu_seqlens_q[b] + i of [total_q][heads]; else
      // [b][h][tq]. The sequence is dense: [1][h][tq_b].
      const int64_t x = p_.packed_q()
                            ? (p_.packed->cu_seqlens_q[static_cast<size_t>(b_)] + i) * p_.heads + h
                            : (b_ * p_.heads + h) * p_.tq + i;
      const int64_t y = h * sequence_.tq + i;
      for (int64_t c = 0; c < width; ++c)
        to[static_cast<size_t>(x * width + c)] = from[static_cast<size_t>(y * width + c)];
    }
  }
}

void SequencePlacement::scores(std::vector<double>& to, const std::vector<double>& from) const {
  for (int64_t h = 0; h < p_.heads; ++h)
    for (int64_t i = 0; i < tq_; ++i)
      for (int64_t j = 0; j < tk_; ++j)
        to[weight_index(p_, b_, h, i, j)] = from[weight_index(sequence_, 0, h, i, j)];
}

void SequencePlacement::key_rows(std::vector<double>& to, const std::vector<double>& from,
                                 int64_t width) const {
  for (int64_t g = 0; g < p_.kv_heads; ++g) {
    for (int64_t j = 0; j < tk_; ++j) {
      // Packed keys: row cu_seqlens_k[b] + j of [total_k][kv_heads]; else
      // [b][kv_h][tk]. The sequence's [1][kv_h][tk_b] (tk_b at least 1).
      const int64_t x =
          p_.packed_k() ? (p_.packed->cu_seqlens_k[static_cast<size_t>(b_)] + j) * p_.kv_heads + g
                        : (b_ * p_.kv_heads + g) * p_.tk + j;
      const int64_t y = g * sequence_.tk + j;
      for (int64_t c = 0; c < width; ++c)
        to[static_cast<size_t>(x * width + c)] = from[static_cast<size_t>(y * width + c)];
    }
  }
}

void for_each_sequence(const Problem& p, const OracleResult& o,
                       const std::function<void(const Problem&, const OracleResult&,
                                                const SequencePlacement&)>& judge) {
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seq_tq(b) == 0) continue;
    const Problem sequence = sequence_problem(p, b);
    judge(sequence, o.sequences[static_cast<size_t>(b)], SequencePlacement(p, sequence, b));
  }
}

}  // namespace attncheck
