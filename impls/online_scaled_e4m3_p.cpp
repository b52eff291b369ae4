// online_scaled_e4m3_p: a FlashAttention-3 style fp8 kernel that keeps P in
// E4M3 for the P.V product (issue 34, SPEC 4: "E4M3 enters u_p and eta_p
// like the other formats when P is cast to it"), the correct twin of
// broken_fp8_p_unscaled. Per query, in float: an online softmax over
// blocks of 16 keys (as paged_online_f32: the first block's max includes
// the sink, whose exp starts the sum), l summing the unrounded p_j =
// exp(s_j - m), and P.V on P scaled by 256 and rounded to E4M3 (to
// nearest, as round_to does): 256 p_j <= 256 stays below E4M3's largest
// (448), and weights down to 2^-14 stay in its normal range, where the
// unscaled twin loses every weight below 2^-10. out = acc / l / 256 *
// v_descale: 256 is a power of two, so the scale and its removal are exact
// in float above its normal range, and the kernel rounds no more often
// than paged_online_f32 besides the cast. Declared honestly: accum f32,
// p_cast E4M3 (u_p = 2^-4, eta_p = 2^-10: the tolerance's eta_p is that
// of unscaled E4M3, which the scaled cast's 2^-18 stays far below),
// key_block 16, exp_ulps 1 (glibc's expf, tanhf), no flush. A self-standing
// loop rather than an option of paged_online_kernel.cpp, which another
// change was rewriting (its split-K/V path) when this was written.
//
// K/V in E4M3 only (the formats an fp8 kernel reads; q and the output bf16
// or f32), so dtypes is 0: an fp8-only built-in, which the harness hands
// only problems in those combinations (issue 34 item 1).

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "paged_online_kernel.h"

namespace attncheck::impls {
namespace {

// What P is multiplied by before its cast to E4M3 (see the top).
constexpr float kPScale = 256.0f;

// x rounded to the output format (exact for f32).
double to_output(const Problem& p, float x) {
  return p.dtype == DType::f32 ? static_cast<double>(x) : round_to(p.dtype, x);
}

ForwardResult forward(const Problem& p) {
  if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  const auto rows = static_cast<size_t>(p.total_q() * p.heads);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  const Descales descale = p.descale.value_or(Descales{});
  const auto factor = static_cast<float>(p.scale * descale.q * descale.k);
  const auto v_descale = static_cast<float>(descale.v);
  const auto cap = static_cast<float>(p.softcap);
  const auto dk = static_cast<size_t>(p.dk), dv = static_cast<size_t>(p.dv);
  constexpr auto kBlock = static_cast<size_t>(kPagedKeyBlock);
  std::vector<float> q(dk), s(kBlock), acc(dv);
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const bool has_sink = !p.sink.empty();
      const float sink = has_sink ? static_cast<float>(p.sink[static_cast<size_t>(h)]) : 0.0f;
      for (int64_t i = 0; i < p.seq_tq(b); ++i) {
        keys.clear();
        for (int64_t j = 0; j < p.seq_tk(b); ++j)
          if (p.allowed(b, h, i, j)) keys.push_back(j);
        const size_t row = row_index(p, b, h, i);
        if (keys.empty()) {
          // Only the sink (first_empty_row_error let no other row through):
          // o = 0 and lse = sink_h exactly (SPEC 1.1).
          r.lse[row] = p.sink[static_cast<size_t>(h)];
          continue;
        }
        for (size_t d = 0; d < dk; ++d)
          q[d] = static_cast<float>(p.q_at(b, h, i, static_cast<int64_t>(d)));
        std::fill(acc.begin(), acc.end(), 0.0f);
        float m = 0, l = 0;
        for (size_t c0 = 0; c0 < keys.size(); c0 += kBlock) {
          const size_t n = std::min(kBlock, keys.size() - c0);
          float block_max = -std::numeric_limits<float>::infinity();
          for (size_t c = 0; c < n; ++c) {
            const int64_t j = keys[c0 + c];
            float dot = 0;
            for (size_t d = 0; d < dk; ++d)
              dot += q[d] * static_cast<float>(p.k_at(b, g, j, static_cast<int64_t>(d)));
            float t = factor * dot;
            if (p.softcap > 0) t = cap * std::tanh(t / cap);
            s[c] = t;
            block_max = std::max(block_max, t);
          }
          if (c0 == 0) {
            m = has_sink ? std::max(sink, block_max) : block_max;
            l = has_sink ? std::exp(sink - m) : 0.0f;
          } else if (block_max > m) {
            // Everything accumulated so far was relative to the old max.
            const float alpha = std::exp(m - block_max);
            l *= alpha;
            for (float& x : acc) x *= alpha;
            m = block_max;
          }
          for (size_t c = 0; c < n; ++c) {
            const int64_t j = keys[c0 + c];
            const float pj = std::exp(s[c] - m);
            l += pj;
            const auto p8 = static_cast<float>(round_to(DType::e4m3, pj * kPScale));
            for (size_t d = 0; d < dv; ++d)
              acc[d] += p8 * static_cast<float>(p.v_at(b, g, j, static_cast<int64_t>(d)));
          }
        }
        for (size_t d = 0; d < dv; ++d) {
          float x = acc[d] / l / kPScale;
          x *= v_descale;
          r.out[out_index(p, b, h, i, static_cast<int64_t>(d))] = to_output(p, x);
        }
        r.lse[row] = static_cast<double>(m + std::log(l));
      }
    }
  }
  return r;
}

ImplInfo info() {
  ImplInfo i = reference_info(
      "online_scaled_e4m3_p", DType::f32, kPagedOnlineFeatures, EmptyRowPolicy::error,
      "FlashAttention-3 style fp8 online softmax in float over blocks of 16 keys, K/V in E4M3 "
      "(paged, packed or dense), P scaled by 256 and kept in E4M3 for P.V (p_cast e4m3), sinks "
      "and descales; no weights, no backward; empty rows are an error");
  i.dtypes = 0;  // only the E4M3 K/V combinations below
  i.precision = kernel_precision(DType::f32, DType::e4m3, kPagedKeyBlock);
  i.combos = {{DType::bf16, DType::e4m3, DType::bf16}, {DType::f32, DType::e4m3, DType::f32}};
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), forward));

}  // namespace
}  // namespace attncheck::impls
