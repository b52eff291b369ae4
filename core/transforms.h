#pragma once
// Problem transforms: rewrites of a problem into another one that the
// properties, the diagnosis and the broken implementations share, so each
// rewrite is written once.

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "attncheck/problem.h"

namespace attncheck {

/// The K/V head query head h reads, for a rewrite that may map heads its
/// own way.
using KvHeadMap = std::function<int64_t(const Problem& p, int64_t h)>;

/// Grouped-query attention as multi-head attention: kv_heads = heads, K/V
/// head h a copy of the K/V head that query head h reads (p.kv_head(h), or
/// `map` when given). Q, K and V come out contiguous; everything else is
/// kept.
Problem expand_kv_heads(const Problem& p, const KvHeadMap& map = {});

/// The problem with V replaced by the tk x tk identity in every (b, K/V
/// head) slice (dv = tk), so that output row i is weight row i: weights
/// observed through the output (its first tk elements). dout is dropped
/// (its shape was for the old dv). K/V in a block format (SPEC 1.2) need
/// dv a multiple of 32: there V is the identity padded with zero columns
/// to the next whole block, dv = 32 ceil(tk / 32).
Problem with_identity_values(const Problem& p);

/// Calls fn(b, g, j) once for every stored key row some sequence reads, in
/// the order b, g, j: a page shared by several sequences (prefix caching)
/// is visited once, by its first reader. For a dense problem every (b, g,
/// j). A rewrite of K or V through kv_offset then changes each stored row
/// once, whichever sequences read it.
void for_each_read_key(const Problem& p,
                       const std::function<void(int64_t b, int64_t g, int64_t j)>& fn);

/// Whether K and V are stored in a block format (q8_0, q4_0; SPEC 1.2).
bool kv_in_blocks(const Problem& p);

/// For K/V in a block format: key row j of K/V head g of sequence b, in K
/// and in V, rounded block by block as ggml's reference quantizer would
/// (round_row_to_blocks), so that a row a rewrite changed element by
/// element is exact in the format again. Nothing for an element format.
/// Returns false when a rounded value is not finite (a block scale past
/// f16's range): the rewrite left the format's range.
bool round_key_to_blocks(Problem& p, int64_t b, int64_t g, int64_t j);

/// Key row j of K/V head g of sequence b, in K and in V, wherever the
/// layout keeps it (kv_offset: a shared page changes for every sequence
/// that reads it), each element x replaced by change(x), then rounded back
/// to blocks for a block format (round_key_to_blocks, whose result it
/// returns): the one rewrite of a key row the properties that change keys
/// share.
bool change_key_row(Problem& p, int64_t b, int64_t g, int64_t j,
                    const std::function<double(double)>& change);

/// round_key_to_blocks for every stored key row some sequence reads
/// (for_each_read_key). Returns false when a rounded value is not finite.
bool round_kv_to_blocks(Problem& p);

/// Whether every K/V row some sequence reads is exact blocks of the block
/// format (true for an element format, whose values are checked one by one
/// elsewhere): whether a rewrite kept the problem in its format.
bool kv_blocks_exact(const Problem& p);

/// For K/V in a block format (SPEC 1.2), K (`values` false) or V (true):
/// rewrites every stored row some sequence reads (for_each_read_key) so
/// that, per block column c (head-dim positions 32c .. 32c + 31), all of
/// them share one f16 scale S_c and their integers are multiples of `step`
/// of magnitude at most step * levels: x becomes S_c step k with k =
/// round(x / (S_c step)) clamped to [-levels, levels], and S_c is the f16
/// nearest max |x| / (step levels) over the column (within f16's smallest
/// subnormal and largest finite; 1 for a column of zeros). Returns S_c per
/// block column. The integers then leave room: k + w with w_t = m_t S_c
/// (|m_t| + step levels within the format's integers) and a V1 + b V2 for
/// coefficients with f a, f b integers (f = step) and (|f a| + |f b|)
/// levels within them stay exact blocks. Nothing (an empty result) for an
/// element format. Deterministic: a function of the problem alone.
std::vector<double> share_block_scales(Problem& p, bool values, int levels, int step = 1);

/// What slice_problem keeps: one batch entry, or all (nullopt); one K/V
/// head with its group of query heads, one query head with its K/V head,
/// or all.
struct SliceChoice {
  std::optional<int64_t> batch;
  std::optional<int64_t> kv_head;
  std::optional<int64_t> head;  ///< wins over kv_head
};

/// The part of a dense problem (not varlen) `choice` keeps, every per
/// batch and per head part (key_valid, mask, bias, dout, sinks) sliced with
/// it; Q, K and V come out contiguous. For shrinking: a counterexample
/// keeps batch and heads above 1 only when the failure needs them.
Problem slice_problem(const Problem& p, const SliceChoice& choice);

}  // namespace attncheck
