#pragma once
// The problem of SPEC section 1: everything an implementation is asked to
// compute, with every field of the C ABI's attncheck_problem.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "attncheck/dtype.h"

namespace attncheck {

/// Where query i sits among the keys: p_i = i (top-left) or
/// p_i = i + tk - tq (bottom-right, as flash-attention aligns).
enum class Align : uint32_t {
  top_left = ATTNCHECK_ALIGN_TOP_LEFT,
  bottom_right = ATTNCHECK_ALIGN_BOTTOM_RIGHT,
};

/// A rank-4 view of doubles: element (i0, i1, i2, i3) lives at
/// data[sum_k i_k * strides[k]]. A stride of 0 broadcasts that axis.
template <typename T>
struct Strided4 {
  std::vector<T> data;
  std::array<int64_t, 4> strides{0, 0, 0, 0};

  /// Element at the given index (no bounds check beyond the vector's).
  const T& at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return data[static_cast<size_t>(i0 * strides[0] + i1 * strides[1] +
                                    i2 * strides[2] + i3 * strides[3])];
  }
  T& at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return data[static_cast<size_t>(i0 * strides[0] + i1 * strides[1] +
                                    i2 * strides[2] + i3 * strides[3])];
  }
};

using Tensor = Strided4<double>;

/// Row-major contiguous strides of a [d0][d1][d2][d3] tensor.
std::array<int64_t, 4> contiguous_strides(int64_t d0, int64_t d1, int64_t d2,
                                          int64_t d3);

/// A contiguous zero tensor of the given shape.
Tensor make_tensor(int64_t d0, int64_t d1, int64_t d2, int64_t d3);

/// An explicit boolean mask or additive bias of shape [B|1][H|1][tq][tk]:
/// a leading dimension of 1 broadcasts.
template <typename T>
struct Broadcast {
  int64_t batch = 1;  ///< 1 or the problem's batch
  int64_t heads = 1;  ///< 1 or the problem's heads
  std::vector<T> data;  ///< row-major [batch][heads][tq][tk]

  /// Element for (b, h, i, j) of a problem with tq x tk scores.
  const T& at(int64_t b, int64_t h, int64_t i, int64_t j, int64_t tq,
              int64_t tk) const {
    const int64_t bb = batch == 1 ? 0 : b, hh = heads == 1 ? 0 : h;
    return data[static_cast<size_t>(((bb * heads + hh) * tq + i) * tk + j)];
  }
  T& at(int64_t b, int64_t h, int64_t i, int64_t j, int64_t tq, int64_t tk) {
    const int64_t bb = batch == 1 ? 0 : b, hh = heads == 1 ? 0 : h;
    return data[static_cast<size_t>(((bb * heads + hh) * tq + i) * tk + j)];
  }
};

/// Per-tensor descales (SPEC 1.1): the logical value of an input element is
/// its stored value times the descale.
struct Descales {
  double q = 1.0, k = 1.0, v = 1.0;
};

/// Packed variable-length sequences (SPEC 1.1): sequence b owns query rows
/// cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (key rows likewise). A packed
/// tensor's element (b, h, i, d) lives at (cu[b] + i) * strides[2] +
/// h * strides[1] + d * strides[3] (strides[0] is 0); its contiguous layout
/// is [total rows][heads][d], flash-attention's varlen layout.
struct PackedSeqs {
  std::vector<int64_t> cu_seqlens_q;  ///< [batch + 1]; empty = dense queries
  std::vector<int64_t> cu_seqlens_k;  ///< [batch + 1]; empty = dense or paged keys
};

/// Paged K/V (SPEC 1.1): key j of sequence b is slot j % page_size of page
/// block_table[b * block_table_stride + j / page_size]. k and v are then
/// [num_pages][kv_heads][page_size][d] tensors (strides as usual).
struct PagedKv {
  std::vector<int64_t> seqlens_k;    ///< [batch] keys per sequence
  std::vector<int64_t> block_table;  ///< [batch][block_table_stride]
  int64_t block_table_stride = 0, page_size = 0, num_pages = 0;
};

/// The keys [first, last] a structural limit (causal, window) leaves a
/// query, clipped to [0, tk); empty when last < first.
struct KeyBand {
  int64_t first = 0, last = -1;

  /// Whether key j lies inside the band.
  bool contains(int64_t j) const { return first <= j && j <= last; }
  /// Whether the band holds no key.
  bool empty() const { return last < first; }
  /// Number of keys in the band.
  int64_t size() const { return empty() ? 0 : last - first + 1; }
};

/// One scaled dot-product attention problem (SPEC section 1). Values are
/// doubles exactly representable in their format (`dtype`, or q_dtype /
/// kv_dtype for the inputs when set). The serving parts (SPEC 1.1) are
/// optional and absent by default: a problem without them is dense, in one
/// format, and can be handed to a plugin of ABI version 1 (plugin_v1.h).
struct Problem {
  DType dtype = DType::f64;
  int64_t batch = 1, heads = 1, kv_heads = 1, tq = 1, tk = 1, dk = 1, dv = 1;
  Tensor q;  ///< [batch][heads][tq][dk]
  Tensor k;  ///< [batch][kv_heads][tk][dk]
  Tensor v;  ///< [batch][kv_heads][tk][dv]
  std::vector<uint8_t> key_valid;  ///< [batch][tk], 1 = allowed; empty = all
  std::optional<Broadcast<uint8_t>> mask;  ///< 1 = allowed
  std::optional<Broadcast<double>> bias;   ///< added after the softcap
  bool causal = false;
  Align align = Align::top_left;  ///< for causal and window
  int64_t window_left = -1, window_right = -1;  ///< -1 = unbounded
  double scale = 1.0;    ///< multiplies q.k
  double softcap = 0.0;  ///< 0 = off
  std::vector<double> dout;  ///< [batch][heads][tq][dv]; empty = none

  // ---- the serving parts and input formats (SPEC 1.1); absent by default ----
  std::optional<DType> q_dtype;   ///< format of q; nullopt = dtype
  std::optional<DType> kv_dtype;  ///< format of k and v; nullopt = dtype
  std::optional<Descales> descale;  ///< nullopt = none (all 1)
  std::vector<double> sink;         ///< [heads] logit sinks; empty = none
  std::optional<PackedSeqs> packed;  ///< nullopt = dense
  std::optional<PagedKv> paged;      ///< nullopt = keys not paged

  /// The ATTNCHECK_FEATURE_* bits of the serving parts this problem needs:
  /// SINK, PACKED, PAGED_KV and DESCALE for the parts that are present.
  uint32_t serving_features() const;

  /// True when the problem cannot be stated in plugin ABI version 1
  /// (plugin_v1.h): a serving part, or an input format other than dtype.
  bool needs_abi_v2() const;

  // ---- sequences (SPEC 1.1). For a dense problem every sequence has tq
  // queries and tk keys; packed and paged problems give each its own. ----

  /// Whether queries are packed (cu_seqlens_q).
  bool packed_q() const { return packed && !packed->cu_seqlens_q.empty(); }
  /// Whether keys are packed (cu_seqlens_k).
  bool packed_k() const { return packed && !packed->cu_seqlens_k.empty(); }
  /// Whether some sequence has its own lengths (packed or paged): such a
  /// problem is judged sequence by sequence (sequence_problem).
  bool varlen() const { return packed_q() || packed_k() || paged.has_value(); }
  /// Queries of sequence b.
  int64_t seq_tq(int64_t b) const;
  /// Keys of sequence b.
  int64_t seq_tk(int64_t b) const;
  /// Query rows of all sequences: the sum of seq_tq (batch * tq when dense).
  int64_t total_q() const;
  /// Stored q element (b, h, i, d) wherever the layout puts it.
  double q_at(int64_t b, int64_t h, int64_t i, int64_t d) const;
  /// Stored k element (b, kv head g, key j, d): packed and paged addressing.
  double k_at(int64_t b, int64_t g, int64_t j, int64_t d) const;
  /// Stored v element (b, kv head g, key j, d).
  double v_at(int64_t b, int64_t g, int64_t j, int64_t d) const;
  /// Offset of element (b, kv head g, key j, d) of k / v inside their data.
  size_t kv_offset(const Tensor& t, int64_t b, int64_t g, int64_t j, int64_t d) const;
  /// Offset of element (b, h, i, d) of q inside its data.
  size_t q_offset(int64_t b, int64_t h, int64_t i, int64_t d) const;

  /// A problem of the given shape with contiguous zero tensors and the
  /// default scale.
  static Problem zeros(DType dtype, int64_t batch, int64_t heads,
                       int64_t kv_heads, int64_t tq, int64_t tk, int64_t dk,
                       int64_t dv);

  /// The double nearest 1/sqrt(dk): the default scale.
  static double default_scale(int64_t dk);

  /// Key position of query i: i, or i + tk - tq when bottom-right aligned.
  /// (A varlen problem aligns each sequence by its own lengths: key_band(b, i).)
  int64_t position(int64_t i) const {
    return align == Align::top_left ? i : i + tk - tq;
  }

  /// Key position of query i of sequence b, aligned by that sequence's own
  /// lengths (SPEC 1.1: i + tk_b - tq_b bottom-right); position(i) when dense.
  int64_t position(int64_t b, int64_t i) const {
    return align == Align::top_left ? i : i + seq_tk(b) - seq_tq(b);
  }

  /// Keys the causal limit leaves query i: j <= position(i) when causal,
  /// every key otherwise.
  KeyBand causal_band(int64_t i) const;

  /// Keys the window leaves query i: position(i) - window_left <= j <=
  /// position(i) + window_right, an unbounded side (-1) reaching the end.
  KeyBand window_band(int64_t i) const;

  /// window_band of query i of sequence b, at position(b, i) and clipped to
  /// the sequence's keys; the same as window_band(i) for a dense problem.
  KeyBand window_band(int64_t b, int64_t i) const;

  /// Keys inside both the causal limit and the window of query i: the only
  /// keys key_valid and the mask can still allow.
  KeyBand key_band(int64_t i) const;

  /// key_band of query i of sequence b, aligned by that sequence's own
  /// lengths (SPEC 1.1: p_i = i + tk_b - tq_b bottom-right) and clipped to
  /// its keys; the same as key_band(i) for a dense problem.
  KeyBand key_band(int64_t b, int64_t i) const;

  /// The K/V head query head h reads (grouped-query attention).
  int64_t kv_head(int64_t h) const { return h / (heads / kv_heads); }

  /// Whether key j is allowed for query i of (b, h): every constraint AND-ed
  /// (for a varlen problem, i < seq_tq(b) and j < seq_tk(b) too).
  bool allowed(int64_t b, int64_t h, int64_t i, int64_t j) const;

  /// Number of allowed keys of row (b, h, i).
  int64_t allowed_count(int64_t b, int64_t h, int64_t i) const;

  /// True when some row has no allowed key and no sink (SPEC 1.1: a row
  /// with only the sink is not empty).
  bool has_empty_rows() const;

  /// Bias element for (b, h, i, j), 0 without bias.
  double bias_at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return bias ? bias->at(b, h, i, j, tq, tk) : 0.0;
  }

  /// Number of score elements B * H * tq * tk (exercise 4's accounting).
  int64_t score_elements() const { return batch * heads * tq * tk; }

  /// Bytes of the score tensor when stored in format d.
  int64_t score_bytes(DType d) const;

  /// Throws std::invalid_argument naming the first inconsistent field
  /// (shapes, strides out of range, non-representable values, ...).
  void validate() const;

  /// The same problem with q, k, v in contiguous [b][h][t][d] layout
  /// (packed tensors [rows][heads][d], paged [pages][kv_heads][slots][d]).
  Problem contiguous() const;

 private:
  void validate_sequences() const;
  Problem contiguous_varlen() const;
};

/// Sequence b of a problem as a dense problem of batch 1 (SPEC 1.1: each
/// sequence is the problem of section 1 with its own tq_b and tk_b): q and
/// k / v gathered from the packed rows or the pages, contiguous; sink,
/// descales, formats, scale, softcap, causal, alignment and window kept;
/// dout gathered. A sequence without keys (tk_b = 0) gets one key of zeros
/// that key_valid disallows, so its rows are empty (sink-only with a
/// sink); one without queries (tq_b = 0) has nothing to compute and is
/// refused (std::invalid_argument). For a dense problem, sequence b is
/// batch entry b.
Problem sequence_problem(const Problem& p, int64_t b);

/// Index of output element (b, h, i, d) in a contiguous [b][h][tq][dv] array
/// (with packed queries: the packed [total_q][heads][dv] array, as out, dout
/// and dq are packed like q).
inline size_t out_index(const Problem& p, int64_t b, int64_t h, int64_t i,
                        int64_t d) {
  if (p.packed_q()) {
    return static_cast<size_t>(((p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i) * p.heads +
                                h) * p.dv + d);
  }
  return static_cast<size_t>(((b * p.heads + h) * p.tq + i) * p.dv + d);
}

/// Index of weight (b, h, i, j) in a contiguous [b][h][tq][tk] array.
inline size_t weight_index(const Problem& p, int64_t b, int64_t h, int64_t i,
                           int64_t j) {
  return static_cast<size_t>(((b * p.heads + h) * p.tq + i) * p.tk + j);
}

/// Index of row (b, h, i) in a contiguous [b][h][tq] array (with packed
/// queries: lse's [heads][total_q], flash-attention's varlen layout).
inline size_t row_index(const Problem& p, int64_t b, int64_t h, int64_t i) {
  if (p.packed_q()) {
    return static_cast<size_t>(h * p.total_q() + p.packed->cu_seqlens_q[static_cast<size_t>(b)] +
                               i);
  }
  return static_cast<size_t>((b * p.heads + h) * p.tq + i);
}

}  // namespace attncheck
