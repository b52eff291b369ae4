#pragma once
// The paged online kernel: single-pass attention in float the way serving
// kernels (vLLM's paged attention, FlashInfer's decode and prefill) run it.
// K and V are a cache in bf16 or E4M3 (per-tensor descales), read key by
// key through the block table when paged (packed or dense otherwise);
// queries are dense or packed; an online softmax over blocks of 16 keys
// with a per-head sink. No weights, no backward (serving is inference).

#include <cstdint>
#include <optional>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Keys per online-softmax block: vLLM's default page (block) size. A
/// fixed block, not the problem's page size, so that the declared
/// key_block holds for every problem; a block may span two pages.
inline constexpr int64_t kPagedKeyBlock = 16;

/// The split-K/V path (flash-decoding; FlashInfer's and vLLM's long-row
/// paths): taken when the problem's longest key sequence (max_seqlen_k)
/// is longer than this, it cuts each row's keys into chunks of this many,
/// runs the online softmax on each, and combines them.
inline constexpr int64_t kPagedSplitKeys = 256;

/// What the serving kernel computes: key padding (a dense sequence's
/// length, as sequence_problem gives a sequence without keys), causal masks
/// and windows in either alignment, GQA, softcap, any scale and strides,
/// lse, and every serving feature; no explicit mask or bias (SPEC 1.1:
/// packed and paged problems have none), no weights, no backward.
inline constexpr Features kPagedOnlineFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW |
    ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_LSE |
    ATTNCHECK_FEATURE_SOFTCAP | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT |
    ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT | ATTNCHECK_FEATURE_SCALE | ATTNCHECK_FEATURE_SINK |
    ATTNCHECK_FEATURE_PACKED | ATTNCHECK_FEATURE_PAGED_KV | ATTNCHECK_FEATURE_DESCALE;

/// The formats it takes {q, k / v, out}: bf16 or f32 queries and output,
/// K/V in bf16 or E4M3.
inline std::vector<DTypeCombo> paged_online_combos() {
  return {{DType::bf16, DType::bf16, DType::bf16},
          {DType::bf16, DType::e4m3, DType::bf16},
          {DType::f32, DType::bf16, DType::f32},
          {DType::f32, DType::e4m3, DType::f32}};
}

/// How the kernel computes, beyond the problem: all defaults in
/// paged_online_f32. p_cast with a power-of-two p_scale is the correct
/// online_scaled_e4m3_p; every other setting is a bug real serving kernels
/// shipped, for the broken twins (impls/broken/).
struct PagedOptions {
  /// The accumulator starts at exp(sink - m) in every lane, as the sum
  /// does: the sink added to the numerator too (a value of all ones).
  bool sink_in_numerator = false;
  /// Sequence b's packed rows (q and k / v) start at cu_seqlens[b + 1];
  /// rows past the end read as 0 (masked loads).
  bool cu_seqlens_off_by_one = false;
  /// Bottom-right alignment from the problem's tq / tk (the packed
  /// maxima) instead of the sequence's own lengths.
  bool align_from_max_lengths = false;
  /// The block table indexed with the key's global index (its sequence's
  /// offset among all keys plus j), within the flat table: row b, column
  /// global / page_size, slot global % page_size. Entries past the table
  /// or outside the pages read as 0.
  bool block_table_global_index = false;
  /// Every slot of the last page is read: keys up to the end of the
  /// sequence's last page (its stale tail) are attended as if in range.
  bool read_page_tail = false;
  /// A sequence's block table read into a fixed array of this many
  /// entries (0 = all): keys on later pages read as 0. Right for every
  /// sequence of at most that many pages.
  int64_t table_entries = 0;
  /// How many times v_descale multiplies the output (1 is right).
  int v_descale_times = 1;
  /// The cache's E4M3 bytes decoded as E5M2.
  bool e4m3_as_e5m2 = false;
  /// P rounded to this format before P.V, without the scale that would
  /// keep weights out of its subnormal range (and not declared).
  std::optional<DType> p_cast;
  /// With p_cast: P multiplied by this before the cast and the sum divided
  /// by it after. 1 is broken_fp8_p_unscaled's cast; a power of two (256)
  /// keeps the weights in E4M3's normal range and is no bug, but the
  /// correct FlashAttention-3 style kernel online_scaled_e4m3_p, which
  /// declares p_cast e4m3 (the scale and its removal are exact).
  float p_scale = 1.0f;
  /// Split-K/V: every chunk starts from the sink, as the whole row's first
  /// block does, so the combine counts it once per chunk.
  bool split_sink_per_chunk = false;
  /// Split-K/V: the combine joins the chunks and forgets the sink.
  bool split_combine_drops_sink = false;
  /// Split-K/V: the chunks' scores without q and k descales, the output
  /// without v_descale (the path's own kernel takes no descales).
  bool split_drops_descales = false;
  /// Split-K/V: every sequence reads max_seqlen_k keys (the problem's tk),
  /// into the next sequence's rows or past the end (read as 0).
  bool split_reads_max_seqlen_k = false;
  /// The sink's share of the running sum dropped when a later 16-key
  /// block raises the max (the rescale restarts the sum from the keys').
  bool sink_lost_on_rescale = false;
  /// cu_seqlens staged for 4 sequences: packed sequence b reads and
  /// writes as sequence b % 4.
  bool cu_seqlens_staged_for_4 = false;
  /// The block table's row stride taken from the lengths (ceil of the
  /// longest seqlens_k over page_size) instead of block_table_stride.
  bool block_table_stride_from_lengths = false;
  /// The sink folded into the state of key block 0 (keys 0 to 15): a row
  /// whose band starts past that block (a sliding window lets the kernel
  /// skip it) never adds the sink.
  bool sink_in_block0 = false;
};

/// Per query (b, h, i), in float: the sequence's key band (causal and
/// window at p_i = i, or i + tk_b - tq_b bottom-right) less the keys a
/// dense problem's key_valid pads, visited in blocks of kPagedKeyBlock of
/// them (n keys, ceil(n / 16) blocks); each key's stored
/// values read from its page (block_table[b][j / page_size], slot
/// j % page_size), its packed row, or its dense row; scores t = f * (q .
/// k) with f = scale * q_descale * k_descale rounded to float once, then
/// the softcap; the first block's max includes the sink (so a sink costs
/// no extra rescale) and its sum starts at exp(sink - m); a later block
/// with a larger max multiplies l and the accumulator by exp(m - m_new)
/// (std::exp, 1 ulp); p_j = exp(s_j - m), l += p_j, acc += p_j v_j.
/// out = acc / l * v_descale, rounded to p.dtype (f32 or bf16); lse = m +
/// log(l). When max_seqlen_k (p.tk) exceeds kPagedSplitKeys, a row of more
/// than that many keys is split (flash-decoding): chunks of 256 of its
/// keys, each that online softmax without the sink, combined as M = max(
/// sink, m_c), l = exp(sink - M) + sum_c l_c exp(m_c - M), acc = sum_c
/// acc_c exp(m_c - M). A row without keys gives o = 0 and lse = sink_h with a sink,
/// the error "query (b=.., h=.., i=..) has no allowed key" without one.
/// Outputs are laid out by out_index / row_index (packed like q).
ForwardResult paged_online_forward(const Problem& p, const PagedOptions& o = {});

}  // namespace attncheck::impls
