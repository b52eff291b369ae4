#pragma once
// A kernel whose stages compute in formats of their own (SPEC 4.1), each
// operation rounded to its stage's format: Q rounded before q.k, the q.k
// sums, the softmax (online, over key blocks), the P.V accumulator
// (unnormalised, rescaled with the running max), and the output. The
// built-ins that show precision by stage and by path are made of it: an
// f16 P.V accumulator beside f32 scores (as ggml's CPU flash attention
// keeps it), Q rounded to f16, bf16 q.k sums with an f32 softmax, and a
// kernel that dispatches between two such arithmetics.

#include <cstdint>
#include <optional>

#include "attncheck/implementation.h"

namespace attncheck::impls {

/// The formats of a staged kernel's stages.
struct StagedArithmetic {
  std::optional<DType> q_cast;     ///< Q rounded to it before q.k; none = kept
  DType score = DType::f32;        ///< every product and sum of q.k, and * scale
  /// 0: one q.k sum over all dk products. n > 0: sums of n products in
  /// `score`, added into an f32 total (runs short enough to judge, joined
  /// in f32, as SPEC 2's baseline allowance T^L models).
  int64_t score_run = 0;
  DType softmax = DType::f32;      ///< max, s - m, exp, l, the rescale factors
  DType pv = DType::f32;           ///< the P.V accumulator and its rescales
  /// Keys per online-softmax block: the running max is updated (and the
  /// accumulators rescaled) once per block.
  int64_t key_block = 64;
  /// 0: one P.V accumulator for the whole row. n > 0: the accumulator is
  /// added into an f32 total after every n keys and restarted (runs short
  /// enough to judge, joined in f32).
  int64_t pv_run = 0;
  /// Before an update would take the P.V accumulator to half its format's
  /// largest finite or beyond, the accumulator is added into the f32 total
  /// and restarted: an unnormalised 16-bit sum then never overflows (SPEC
  /// 4.1's range rule: an overflow there is a failure). With values that
  /// are themselves in a 16-bit format each update fits.
  bool pv_guard = true;
};

/// Out and lse for `p` (dense, every feature of impl_common.h's
/// kOnlineFeatures), computed as `a` says. Empty rows are an error.
ForwardResult staged_forward(const Problem& p, const StagedArithmetic& a);

/// The precision traits that declare `a` honestly: each stage its format,
/// accum the coarsest of them (older harnesses judge by it alone), exp
/// within 1 ulp (the C library's), P not cast (p_cast = softmax).
PrecisionTraits staged_precision(const StagedArithmetic& a);

}  // namespace attncheck::impls
