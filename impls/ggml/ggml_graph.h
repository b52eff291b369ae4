#pragma once
// What the ggml adapters share: the translation of a Problem into the ggml
// graph llama.cpp builds for attention, its computation on ggml's CPU
// backend, and the adapter's view of which path ggml's dispatch takes.
// The translation never computes attention itself: it copies values into
// ggml tensors of the declared formats, writes the constraints into ggml's
// additive f16 mask, and reads the f32 result back.

#include <cstdint>
#include <optional>
#include <string>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls::ggml_adapters {

/// Which of llama.cpp's two attention graphs an adapter builds.
enum class Graph {
  /// ggml_flash_attn_ext(q, k, v, mask, scale, 0, softcap) with
  /// ggml_flash_attn_ext_add_sinks (llama.cpp's -fa on).
  flash,
  /// mul_mat(k, q); softcap as scale, tanh, scale; ggml_soft_max_ext(kq,
  /// mask, scale, 0) with ggml_soft_max_add_sinks; mul_mat(v^T, kq)
  /// (llama.cpp's -fa off, V stored transposed as its cache keeps it; a
  /// q8_0 / q4_0 V, which llama.cpp allows only with flash attention, is
  /// stored in rows of dv and dequantized to f32 and transposed in the
  /// graph: ggml_cast, ggml_transpose, ggml_cont).
  softmax,
};

/// One adapter: a graph, the K/V format, ggml's thread count, and whether
/// the CPU backend's reference flag (cplan.use_ref) is set.
struct GgmlSetup {
  Graph graph = Graph::flash;
  DType kv = DType::f16;  ///< f16, bf16, f32, q8_0 or q4_0
  int threads = 1;
  bool use_ref = false;
};

/// Names of the dispatch paths of ggml_compute_forward_flash_attn_ext_f16
/// (ggml-cpu/ops.cpp), as the adapters declare them.
inline constexpr const char* kPathVec = "vec";            ///< one_chunk: one query row at a time
inline constexpr const char* kPathTiled = "tiled";        ///< 64-query tiles, f32 GEMMs
inline constexpr const char* kPathSplitKv = "split_kv";  ///< decode: keys split over threads

/// The path ggml's flash attention takes for `p` under `s`, as the
/// adapter reads ops.cpp's dispatch (ggml_compute_forward_flash_attn_ext_f16):
/// split_kv when use_ref is off, there is one query row per head (tq = 1,
/// batch 1), K and V are f16 or f32 and there are at least 512 keys; tiled
/// when use_ref is off, K/V are f16 or f32, tq >= 64 (GGML_FA_TILE_Q) and
/// dv is a multiple of the f32 vector width ggml was built with; vec
/// otherwise. tests/impls/test_ggml.cpp checks this view against what ggml
/// computes.
const char* flash_path(const Problem& p, const GgmlSetup& s);

/// Elements of an f32 SIMD register in the ggml build loaded (GGML_F32_EPR:
/// 16 with AVX-512, 8 with AVX, 4 with SSE3 or NEON), from ggml's
/// ggml_cpu_has_* report of what it was compiled for.
int ggml_f32_epr();

/// Whether ggml_vec_dot_f16 of the loaded build sums in f16 (AVX512-FP16
/// or ARM FP16 vector arithmetic builds) rather than f32: found by calling
/// it on a sum whose f16 and f32 values differ (1 + 2^-12 over two
/// elements in the same SIMD lane), once.
bool f16_dot_sums_in_f16();

/// Runs `p` through `s`'s graph. UNSUPPORTED for what ggml's tensors
/// cannot state exactly: a bias element (it travels in the f16 mask) that
/// is not an f16 value. The result's path is the index of flash_path's
/// name in `paths` (flash graph only; -1 otherwise).
ForwardResult run(const Problem& p, const GgmlSetup& s, const std::vector<ImplPath>& paths);

/// Where ggml came from (version, package, commit), for descriptions.
std::string ggml_origin();

}  // namespace attncheck::impls::ggml_adapters
