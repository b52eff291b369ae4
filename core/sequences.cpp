#include <algorithm>

#include "attncheck/implementation.h"

namespace attncheck {

ForwardResult sequence_result(const Problem& p, const ForwardResult& r, int64_t b) {
  if (r.status != Status::ok) return r;
  const Problem s = sequence_problem(p, b);
  ForwardResult out;
  out.out.assign(static_cast<size_t>(s.heads * s.tq * s.dv), 0.0);
  if (!r.lse.empty()) out.lse.assign(static_cast<size_t>(s.heads * s.tq), 0.0);
  if (!r.weights.empty()) out.weights.assign(static_cast<size_t>(s.heads * s.tq * s.tk), 0.0);
  const int64_t nk = p.seq_tk(b);
  for (int64_t h = 0; h < s.heads; ++h) {
    for (int64_t i = 0; i < s.tq; ++i) {
      for (int64_t d = 0; d < s.dv; ++d) {
        out.out[out_index(s, 0, h, i, d)] = r.out[out_index(p, b, h, i, d)];
      }
      if (!r.lse.empty()) out.lse[row_index(s, 0, h, i)] = r.lse[row_index(p, b, h, i)];
      if (!r.weights.empty()) {
        // Weights are [b][h][tq][tk] for every problem that returns them
        // (packed queries do not, SPEC 1.1).
        for (int64_t j = 0; j < nk; ++j) {
          out.weights[weight_index(s, 0, h, i, j)] = r.weights[weight_index(p, b, h, i, j)];
        }
      }
    }
  }
  return out;
}

BackwardResult sequence_result(const Problem& p, const BackwardResult& r, int64_t b) {
  if (r.status != Status::ok) return r;
  const Problem s = sequence_problem(p, b);
  BackwardResult out;
  out.dq.assign(static_cast<size_t>(s.heads * s.tq * s.dk), 0.0);
  out.dk.assign(static_cast<size_t>(s.kv_heads * s.tk * s.dk), 0.0);
  out.dv.assign(static_cast<size_t>(s.kv_heads * s.tk * s.dv), 0.0);
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t i = 0; i < s.tq; ++i)
      for (int64_t d = 0; d < s.dk; ++d) {
        const size_t from = p.packed_q()
            ? static_cast<size_t>(((p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i) * p.heads + h) * p.dk + d)
            : static_cast<size_t>(((b * p.heads + h) * p.tq + i) * p.dk + d);
        out.dq[static_cast<size_t>((h * s.tq + i) * s.dk + d)] = r.dq[from];
      }
  // dk / dv: packed like k (contiguous [total_k][kv_heads][d]) or dense.
  const int64_t nk = p.seq_tk(b);
  const auto key_row = [&](int64_t g, int64_t j, int64_t width, int64_t d) {
    if (p.packed_k()) {
      return static_cast<size_t>(((p.packed->cu_seqlens_k[static_cast<size_t>(b)] + j) *
                                      p.kv_heads + g) * width + d);
    }
    return static_cast<size_t>(((b * p.kv_heads + g) * p.tk + j) * width + d);
  };
  for (int64_t g = 0; g < s.kv_heads; ++g)
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t d = 0; d < s.dk; ++d)
        out.dk[static_cast<size_t>((g * s.tk + j) * s.dk + d)] = r.dk[key_row(g, j, p.dk, d)];
      for (int64_t d = 0; d < s.dv; ++d)
        out.dv[static_cast<size_t>((g * s.tk + j) * s.dv + d)] = r.dv[key_row(g, j, p.dv, d)];
    }
  return out;
}

}  // namespace attncheck
