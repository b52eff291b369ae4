// The ggml adapters: ggml's CPU attention as llama.cpp builds it (and so
// as ollama, LM Studio and node-llama-cpp run it), one adapter per
// arithmetic ggml has on this machine:
//
//   ggml_fa_{f16,bf16,f32}[_mt|_ref]   ggml_flash_attn_ext (llama.cpp -fa on)
//   ggml_softmax_{f16,bf16,f32}[_mt]   mul_mat, ggml_soft_max_ext, mul_mat
//                                      (llama.cpp -fa off)
//   ggml_fa_{q8_0,q4_0}                the same with block-quantized K/V
//   ggml_softmax_{q8_0,q4_0}           (-ctk q8_0 -ctv q8_0, SPEC 1.2)
//
// The suffix is the K/V cache format (-ctk / -ctv); Q and the output are
// f32, as llama.cpp's graph has them (the combination q=f32,kv=F,out=f32).
// No suffix: one ggml thread. _mt: 3 threads (ggml splits query rows over
// threads and, in decode, the keys: 3 makes chunks of unequal length).
// _ref: one thread with the CPU backend's reference flag (cplan.use_ref,
// ggml_backend_cpu_set_use_ref), which forces flash attention's vec path.
// The block formats have neither: ggml's flash attention takes the vec
// path for them whatever the threads or the flag (its tiled and split_kv
// paths need f16 or f32 K/V), and threads only split whole query rows, so
// _mt and _ref would compute what the one-thread adapter computes.
//
// Every feature ggml's attention has: key padding, causal (either
// alignment), windows, explicit masks and a bias, all through its additive
// f16 mask; GQA (K/V heads broadcast over groups of query heads, as
// attncheck groups them); softcap; sinks; any scale. What a call cannot
// state exactly is refused (UNSUPPORTED): a bias element that is not an
// f16 value. A query with no allowed key: flash attention returns zeros
// (its sum S = 0 is replaced by 1/S = 0), declared `zero`; the soft_max
// graph returns NaN (fixtures/expected-failures.json).
//
// Precision by stage and by path (SPEC 4.1), from ggml-cpu/ops.cpp, vec.h,
// vec.cpp and simd-mappings.h of the ggml built (docs/ggml.md gives each
// line it rests on):
// - flash attention, vec path (ggml_compute_forward_flash_attn_ext_f16_one_chunk):
//   Q converted to K's vec_dot_type (f16 for f16 K, bf16 for bf16 K:
//   q_cast = kv); q.k by ggml_vec_dot_f16 / _bf16 / _f32, summing in f32
//   (in f16 on builds with AVX512-FP16 or ARM FP16 vector arithmetic,
//   found by calling ggml's own dot: f16_dot_sums_in_f16); scale, softcap,
//   mask and the online softmax in f32 with the C library's expf (1 ulp),
//   rescaling on every new maximum (key_block 1); with f16 V the
//   unnormalised P.V sum lives in an f16 accumulator (VKQ16, every update
//   ggml_vec_mad_f16 rounded to f16; the weight itself rounded to f16 on
//   native-f16 builds: p_cast f16 there), with bf16 or f32 V in f32; the
//   final 1/S multiply in f32.
// - tiled path (ggml_compute_forward_flash_attn_ext_tiled, f16 or f32 K/V,
//   from 64 queries): Q kept in f32, K and V converted to f32, both
//   products f32 GEMMs, the softmax per 64-key tile with ggml_v_expf
//   (ggml_vec_soft_max_f32; within 3 ulps) and key_block 64.
// - split_kv path (decode over >= 512 keys, f16 or f32 K/V): the vec path
//   over each thread's chunk of keys, the chunks joined in f32.
// - the soft_max graph: Q converted to K's vec_dot_type by mul_mat, q.k
//   summed as ggml_vec_dot sums it, S stored in f32, the softmax in f32
//   (ggml_v_expf within 3 ulps, the sum in double, one pass), P converted
//   to V's vec_dot_type by the second mul_mat (p_cast = kv), P.V summed as
//   the first.
// - q8_0 / q4_0 K/V, flash attention (vec path only): Q quantized to q8_0,
//   K's vec_dot_type for both (quantize_row_q8_0, arch/x86/quants.c: d =
//   amax / 127 stored as f16, integers round(x * 127 / amax)): q_cast =
//   kv, which SPEC 1.2 reads as Q8_0; q.k by ggml_vec_dot_q8_0_q8_0 /
//   _q4_0_q8_0, exact integer sums per block times the f16 scales' product
//   (exact in f32), summed in f32; V dequantized to f32 (v_to_float, exact)
//   and accumulated in VKQ32 with ggml_vec_mad_f32: pv_accum f32, as for
//   bf16 V; softmax as above (expf, key_block 1).
// - q8_0 / q4_0, soft_max graph: mul_mat(k, q) quantizes Q to q8_0 (the
//   same quantize_row_q8_0) and sums as the flash path does, or in
//   llamafile's tinyBLAS_Q0 (f32 fma of the same block products); V is
//   dequantized to f32 in the graph (ggml_graph.cpp: llama.cpp has no
//   quantized V without flash attention), so P stays f32 (no p_cast) and
//   P.V is an f32 product.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../impl_common.h"
#include "attncheck/registry.h"
#include "ggml_graph.h"

#include <ggml-cpu.h>

namespace attncheck::impls::ggml_adapters {
namespace {

constexpr Features kGgmlFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW |
    ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_BIAS | ATTNCHECK_FEATURE_GQA |
    ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_SOFTCAP | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT |
    ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT | ATTNCHECK_FEATURE_SCALE | ATTNCHECK_FEATURE_SINK;

// ggml_v_expf (vec.h; the tiled path's and ggml_vec_soft_max_f32's exp):
// measured against a correctly rounded exp over the inputs a softmax gives
// it (x - max in [-104, 0]): up to 2.22 ulps of f32 in the AVX-512 build,
// 1.93 in the AVX2 build (its comment claims 1.45358 + 0.5); 3 ulps bounds
// both. It never flushes a subnormal result to zero.
constexpr uint32_t kVExpfUlps = 3;

// The format q.k (and, on the same builds, the f16 P.V updates) are summed
// in by ggml_vec_dot of K/V format kv.
DType dot_accum(DType kv) {
  return kv == DType::f16 && f16_dot_sums_in_f16() ? DType::f16 : DType::f32;
}

// bf16 dot products on AVX512-BF16 builds run VDPBF16PS (vec.cpp's
// ggml_vec_dot_bf16 and llamafile's bf16 tinyBLAS), which ignores MXCSR
// and flushes subnormal f32 results to zero (Intel SDM): the q.k sums'
// format flushes (kFtzAccum; the softmax, which it also names, does not,
// which only loosens its terms by twice f32's smallest normal).
uint32_t dot_flushes(DType kv) {
  return kv == DType::bf16 && ggml_cpu_has_avx512_bf16() ? kFtzAccum : 0u;
}

PrecisionTraits base_precision() {
  PrecisionTraits t;
  t.accum = DType::f32;
  t.p_cast = DType::f32;
  t.exp_ulps = 1;
  t.flush_to_zero = false;
  t.key_block = 0;
  t.softmax_accum = DType::f32;
  return t;
}

// Where ggml's vec_dot computes q.k: Q converted to K's vec_dot_type
// (q_cast = kv), the sums as dot_accum and dot_flushes say.
PrecisionTraits vec_dot_precision(DType kv) {
  PrecisionTraits t = base_precision();
  t.q_cast_kv = true;
  t.score_accum = dot_accum(kv);
  t.ftz_formats = dot_flushes(kv);
  return t;
}

// Flash attention's vec path (and split_kv's chunks).
PrecisionTraits vec_precision(DType kv) {
  PrecisionTraits t = vec_dot_precision(kv);
  t.key_block = 1;
  if (kv == DType::f16) {
    t.pv_accum = DType::f16;
    // Native-f16 builds round the weight to f16 before the update.
    if (f16_dot_sums_in_f16()) t.p_cast = DType::f16;
  } else {
    t.pv_accum = DType::f32;
  }
  // accum: the coarsest stage, for harnesses that read it alone.
  t.accum = kv == DType::f16 ? DType::f16 : DType::f32;
  return t;
}

PrecisionTraits tiled_precision() {
  PrecisionTraits t = base_precision();
  t.score_accum = DType::f32;
  t.pv_accum = DType::f32;
  t.exp_ulps = kVExpfUlps;
  t.key_block = 64;
  return t;
}

PrecisionTraits softmax_graph_precision(DType kv) {
  PrecisionTraits t = vec_dot_precision(kv);
  // The format V enters the second mul_mat in: block V is dequantized to
  // f32 first (ggml_graph.cpp).
  const DType v_format = is_block_format(kv) ? DType::f32 : kv;
  t.pv_accum = dot_accum(v_format);
  t.p_cast = v_format;
  t.exp_ulps = kVExpfUlps;
  t.accum = kv == DType::f16 && f16_dot_sums_in_f16() ? DType::f16 : DType::f32;
  return t;
}

ImplInfo adapter_info(std::string name, const GgmlSetup& s, std::string description) {
  ImplInfo info;
  info.name = std::move(name);
  info.kind = Kind::adapter;
  info.combos = {{DType::f32, s.kv, DType::f32}};
  info.features = kGgmlFeatures;
  info.empty_rows = EmptyRowPolicy::zero;
  info.description = std::move(description) + "; " + ggml_origin();
  info.threads = static_cast<uint32_t>(s.threads);
  if (s.graph == Graph::softmax) {
    info.precision = softmax_graph_precision(s.kv);
    return info;
  }
  info.paths.push_back({kPathVec, vec_precision(s.kv)});
  // ggml's tiled and split_kv paths take f16 or f32 K/V only (flash_path).
  if ((s.kv == DType::f16 || s.kv == DType::f32) && !s.use_ref) {
    info.paths.push_back({kPathTiled, tiled_precision()});
    info.paths.push_back({kPathSplitKv, vec_precision(s.kv)});
  }
  info.precision = info.paths.front().precision;
  for (const ImplPath& path : info.paths) info.precision = loosest(info.precision, path.precision, s.kv);
  return info;
}

std::shared_ptr<const Implementation> make(std::string name, GgmlSetup s, std::string description) {
  ImplInfo info = adapter_info(std::move(name), s, std::move(description));
  std::vector<ImplPath> paths = info.paths;
  return std::make_shared<FunctionImpl>(
      std::move(info), [s, paths](const Problem& p) { return run(p, s, paths); });
}

// Registers the adapters of one K/V format.
bool register_format(DType kv, const char* suffix) {
  const std::string fmt(dtype_name(kv));
  const std::string fa = "ggml_flash_attn_ext, Q f32, K/V " + fmt;
  const std::string sm = "mul_mat + ggml_soft_max_ext + mul_mat, Q f32, K/V " + fmt;
  register_impl(make(std::string("ggml_fa_") + suffix, {Graph::flash, kv, 1, false}, fa + ", 1 thread"));
  register_impl(make(std::string("ggml_fa_") + suffix + "_mt", {Graph::flash, kv, 3, false},
                     fa + ", 3 threads"));
  register_impl(make(std::string("ggml_fa_") + suffix + "_ref", {Graph::flash, kv, 1, true},
                     fa + ", 1 thread, use_ref"));
  register_impl(make(std::string("ggml_softmax_") + suffix, {Graph::softmax, kv, 1, false},
                     sm + ", 1 thread"));
  register_impl(make(std::string("ggml_softmax_") + suffix + "_mt", {Graph::softmax, kv, 3, false},
                     sm + ", 3 threads"));
  return true;
}

// Registers the adapters of one block format: one thread each (see the
// top: more threads or use_ref compute the same).
bool register_block_format(DType kv, const char* suffix) {
  const std::string fmt(dtype_name(kv));
  register_impl(make(std::string("ggml_fa_") + suffix, {Graph::flash, kv, 1, false},
                     "ggml_flash_attn_ext, Q f32 (quantized to q8_0 by ggml), K/V " + fmt +
                         ", 1 thread"));
  register_impl(make(std::string("ggml_softmax_") + suffix, {Graph::softmax, kv, 1, false},
                     "mul_mat + ggml_soft_max_ext + mul_mat, Q f32 (quantized to q8_0 by ggml), "
                     "K " + fmt + ", V " + fmt + " dequantized to f32 in the graph, 1 thread"));
  return true;
}

[[maybe_unused]] const bool kRegistered =
    register_format(DType::f16, "f16") && register_format(DType::bf16, "bf16") &&
    register_format(DType::f32, "f32") && register_block_format(DType::q8_0, "q8_0") &&
    register_block_format(DType::q4_0, "q4_0");

}  // namespace
}  // namespace attncheck::impls::ggml_adapters
