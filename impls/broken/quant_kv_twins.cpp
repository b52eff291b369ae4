// The broken twins of the block-quantized K/V references (SPEC 1.2): the
// kernel of ../quant_kv_kernel.h with one byte-level slip of QuantKvOptions,
// the bugs such kernels have, declared exactly as the reference it breaks
// (quant_kv_f32, or quant_kv_q8_f32 for Q's block scale), each caught by
// MatchesOracle. The slips of a block index (a scale from the neighbouring
// block, the last block dropped) exist only in rows of two blocks or
// more: their counterexamples have dk or dv 64.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../impl_common.h"
#include "../quant_kv_kernel.h"
#include "attncheck/registry.h"

namespace attncheck::impls::broken {
namespace {

std::shared_ptr<const Implementation> twin(std::string name, std::string description,
                                           std::vector<DType> kv, QuantKvOptions o) {
  ImplInfo i = reference_info(std::move(name), DType::f32, kLoopFeatures, EmptyRowPolicy::error,
                              std::move(description));
  i.kind = Kind::broken;
  i.caught_by = "MatchesOracle";
  i.dtypes = 0;
  for (DType d : kv) i.combos.push_back({DType::f32, d, DType::f32});
  if (o.quantize_q) i.precision.q_cast = DType::q8_0;
  return std::make_shared<FunctionImpl>(std::move(i),
                                        [o](const Problem& p) { return quant_kv_forward(p, o); });
}

ATTNCHECK_REGISTER_IMPL(twin("broken_q4_nibbles_swapped",
                             "quant_kv_f32 reading q4_0's element t < 16 from the high nibble "
                             "and t >= 16 from the low one",
                             {DType::q4_0}, {.nibbles_swapped = true}));

ATTNCHECK_REGISTER_IMPL(twin("broken_kv_scale_next_block",
                             "quant_kv_f32 scaling K/V block c by the f16 scale of block c + 1 "
                             "of the same row (rows of two blocks or more)",
                             {DType::q8_0, DType::q4_0}, {.kv_scale_from_next_block = true}));

ATTNCHECK_REGISTER_IMPL(twin("broken_q_scale_from_k_block",
                             "quant_kv_q8_f32 scaling each block sum by d_k * d_k: Q's q8_0 block "
                             "scale read from K's block (x[ib].d for y[ib].d)",
                             {DType::q8_0, DType::q4_0},
                             {.quantize_q = true, .q_scale_from_k_block = true}));

// Issue 51: a per-row Q scale loses nothing where every block of a row has
// the magnitude of the others, as the plain draws had; the block model of
// the real-size values (a row with one large block and small ones) shows
// it: the small blocks round to 0.
ATTNCHECK_REGISTER_IMPL(twin("broken_q8_scale_per_row",
                             "quant_kv_q8_f32 quantizing each Q row to q8_0 with one scale for "
                             "the row (its largest magnitude / 127) instead of one per block of "
                             "32",
                             {DType::q8_0, DType::q4_0},
                             {.quantize_q = true, .q_scale_per_row = true}));

ATTNCHECK_REGISTER_IMPL(twin("broken_q4_offset_forgotten",
                             "quant_kv_f32 taking q4_0's nibble as the integer, without its -8 "
                             "offset",
                             {DType::q4_0}, {.q4_offset_forgotten = true}));

ATTNCHECK_REGISTER_IMPL(twin("broken_last_block_dropped",
                             "quant_kv_f32 dropping the last block of a K or V row of two "
                             "blocks or more (dk or dv >= 64)",
                             {DType::q8_0, DType::q4_0}, {.last_block_dropped = true}));

}  // namespace
}  // namespace attncheck::impls::broken
