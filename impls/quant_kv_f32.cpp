// The block-quantized K/V references (SPEC 1.2), llama.cpp's quantized K/V
// cache: K and V in q8_0 or q4_0 bytes, decoded block by block in the
// kernel (quant_kv_kernel.h). quant_kv_f32 keeps Q in f32 and forms q.k on
// the decoded K in float; quant_kv_q8_f32 quantizes Q to q8_0 as ggml does
// for such K and forms each score from integer block sums (ggml's
// vec_dot_q8_0_q8_0 and vec_dot_q4_0_q8_0), declared q_cast q8_0 (SPEC
// 4.1). Otherwise both are one pass in float with the C library's exp and
// tanh (1 ulp): accum f32, P not cast, exp_ulps 1, no flush.
//
// K/V in blocks only, so dtypes is 0 and the combinations list q f32 and
// an f32 output with each block format.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "quant_kv_kernel.h"

namespace attncheck::impls {
namespace {

ImplInfo info(const char* name, bool quantize_q, const char* description) {
  ImplInfo i = reference_info(name, DType::f32, kLoopFeatures, EmptyRowPolicy::error, description);
  i.dtypes = 0;  // only the block K/V combinations below
  i.combos = {{DType::f32, DType::q8_0, DType::f32}, {DType::f32, DType::q4_0, DType::f32}};
  if (quantize_q) i.precision.q_cast = DType::q8_0;
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    info("quant_kv_f32", false,
         "K/V in q8_0 or q4_0 blocks read from ggml's bytes and decoded into float, q f32, "
         "per-query loops in float (scale rounded to float), weights and lse; empty rows are an "
         "error"),
    [](const Problem& p) { return quant_kv_forward(p, {}); }));

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    info("quant_kv_q8_f32", true,
         "as quant_kv_f32 with Q quantized per block of 32 to q8_0 as ggml's quantize_row_q8_0 "
         "does and scores from integer block sums times d_q d_k (ggml's vec_dot_q8_0_q8_0 / "
         "vec_dot_q4_0_q8_0), declared q_cast q8_0"),
    [](const Problem& p) {
      QuantKvOptions o;
      o.quantize_q = true;
      return quant_kv_forward(p, o);
    }));

}  // namespace
}  // namespace attncheck::impls
