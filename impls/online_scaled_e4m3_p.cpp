// online_scaled_e4m3_p: a FlashAttention-3 style fp8 kernel that keeps P in
// E4M3 for the P.V product (SPEC 4: "E4M3 enters u_p and eta_p
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
// key_block 16, exp_ulps 1 (glibc's expf, tanhf), no flush. It is
// paged_online_kernel.h's kernel (its split-K/V path included) with the
// scaled cast (PagedOptions::p_scale: a power of two is no bug).
//
// K/V in E4M3 only (the formats an fp8 kernel reads; q and the output bf16
// or f32), so dtypes is 0: an fp8-only built-in, which the harness hands
// only problems in those combinations.

#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "paged_online_kernel.h"

namespace attncheck::impls {
namespace {

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

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  PagedOptions scaled_cast;  // no bug: P * 256 in E4M3, declared
  scaled_cast.p_cast = DType::e4m3;
  scaled_cast.p_scale = 256.0f;
  return paged_online_forward(p, scaled_cast);
}));

}  // namespace
}  // namespace attncheck::impls
