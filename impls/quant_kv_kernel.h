#pragma once
// The block-quantized K/V kernel (SPEC 1.2): K and V read as ggml's q8_0 or
// q4_0 bytes, as llama.cpp's quantized K/V cache holds them, with Q in f32
// or quantized to q8_0 as ggml does before its block dot products. The
// references quant_kv_f32 and quant_kv_q8_f32 and their broken twins
// (impls/broken/quant_kv_twins.cpp) share it, each twin with one of
// QuantKvOptions' slips switched on.

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// What the kernel computes besides the K/V format: how it forms Q's side
/// of the block dot products, and the byte-level slips of block kernels
/// the broken twins carry (all off in the references).
struct QuantKvOptions {
  /// Q rounded per block of 32 to q8_0 as ggml's quantize_row_q8_0 does
  /// (round_block), and each score's block sums formed as ggml's
  /// vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0: an integer sum per block times
  /// (d_q * d_k) in float, the blocks summed in float. Otherwise Q in f32
  /// and each K element d * n decoded into float (exact: an f16 times an
  /// integer of 8 bits), the q.k sum in float.
  bool quantize_q = false;
  /// q4_0: element t < 16 read from the high nibble of byte t, t >= 16
  /// from the low nibble of byte t - 16 (the two halves swapped).
  bool nibbles_swapped = false;
  /// K and V block c of a row scaled by the f16 scale of block c + 1 of
  /// the same row (the last block by its own): an index off by one.
  bool kv_scale_from_next_block = false;
  /// Each q8_0 block sum scaled by d_k * d_k: Q's block scale read from
  /// K's block of the same index (ggml's x[ib].d for y[ib].d).
  bool q_scale_from_k_block = false;
  /// q4_0: the nibble taken as the integer, without its -8 offset.
  bool q4_offset_forgotten = false;
  /// A K or V row of several blocks loses its last block (a loop bound of
  /// nb - 1 in the kernel's many-block path; one block is handled apart).
  bool last_block_dropped = false;
  /// With quantize_q: one q8_0 scale for the whole Q row (its largest
  /// magnitude / 127) instead of one per block of 32, every block's
  /// integers rounded against it. Right for rows of one block, and close
  /// wherever the row's blocks have the same magnitude; a small block
  /// beside a large one rounds to a few steps or to 0.
  bool q_scale_per_row = false;
};

/// Per query, in float, on K/V that the kernel first encodes into ggml's
/// block layout (encode_values) and then reads back byte by byte: scores
/// scale * (q . k) (scale rounded to float), softcap, bias, a stable
/// softmax over the allowed keys (std::exp on float), o = sum_j a_j v_j
/// with v_j decoded from its blocks. Returns out (f32), weights and lse;
/// empty rows are an error (first_empty_row_error). Problems whose K/V
/// format is not a block format, or that are packed or paged, are
/// unsupported (the declarations exclude them).
ForwardResult quant_kv_forward(const Problem& p, const QuantKvOptions& o);

}  // namespace attncheck::impls
