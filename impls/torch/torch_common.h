#pragma once
// What the LibTorch adapters share: their declaration, the thread-count
// setting, and the translation of a Problem's tensors, masks and results to
// and from ATen tensors. The translation never computes attention itself:
// it copies values, converts dtypes and rewrites a mask into the form the
// torch call takes.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls::torch_adapters {

/// The ATen scalar type of an attncheck dtype (f64, f32, bf16 or f16; the
/// adapters declare no other).
at::ScalarType scalar_type(DType d);

/// Torch's message when `e` says a kernel has no implementation for a
/// dtype (AT_DISPATCH's "\"bmm\" not implemented for 'Half'"), else "".
/// Debian's LibTorch 1.13 has no Half matrix product or softmax on the
/// CPU; an adapter answers such a call UNSUPPORTED rather than failing it.
std::string not_implemented_message(const c10::Error& e);

/// Torch parallelises its kernels (OpenMP) and OpenBLAS its GEMMs; one
/// thread (attncheck::impl_threads(), 1 unless attncheck bench --threads
/// says otherwise) keeps every call's summation order the same, so the
/// adapters can be held to Determinism, and keeps them off the other tests'
/// cores. at::set_num_threads sets OpenMP's count for the calling thread
/// only, so the adapters call this at registration and again in every
/// forward().
void use_configured_threads();

/// Declaration of a torch adapter of dtype `d`. Precision: the softmax
/// kernel of ATen's CPU backend computes exp with SLEEF's vectorised
/// Sleef_exp{f,d}{8,16}_u10 (documented maximum error 1.0 ulp) and its
/// scalar tail with the C library's exp (glibc: within 1 ulp), so
/// exp_ulps = 1 in float and in double; scores, sums and P.V are computed in
/// `d` (BLAS GEMMs of `d`), P is not rounded to a narrower type, and the
/// row is one pass (no online rescaling). The CI tolerance judges the claim:
/// a passing case's budget above 1 would show it too optimistic.
///
/// In bf16 (and f16, where torch has the kernels) the same declaration
/// (accum = p_cast = s_cast = d) is what LibTorch 1.13's CPU code does, found
/// by experiment (tests/impls/test_torch.cpp keeps each finding):
/// - matmul of 16-bit tensors accumulates in the 16-bit format where it
///   matters most: bmm of a batch whose tq * tk * dk (or tq * dv * tk) is
///   below 400 runs baddbmm_cpu_kernel, which rounds every product and every
///   partial sum to the format; larger batches run cpublas::gemm, which sums
///   in float and rounds once when B is transposed (Q K^T of a contiguous K)
///   but, when B is row-major (P V of a contiguous V), adds each rounded
///   product to a 16-bit result element, key by key. Either is within the
///   error of a 16-bit accumulation (gamma_n with the format's u, Higham's
///   dot-product bound counting the product roundings): accum = d.
/// - S is the matmul's 16-bit result (s_cast = accum: no cast beyond the
///   accumulation's own roundings); the query is scaled first, q * (1 /
///   sqrt(dk)) rounded to the format, one rounding per element that
///   gamma_{dk+2} counts.
/// - softmax of a bf16 tensor converts to float inside (max, exp by SLEEF,
///   sum, division) and rounds P to bf16 once; P is that tensor (weights =
///   P after its rounding), and P V reads it: p_cast = d.
/// Declared by stage (SPEC 4.1): score_accum = s_cast = d (the first
/// matmul, its 16-bit result), softmax_accum = f32 (exp_ulps = 1: SLEEF's
/// and glibc's expf are within 1 ulp of float), p_cast = d, pv_accum = d
/// (the second matmul), accum = d (the coarsest, for older harnesses).
/// Declared with accum = d for every stage, as before, the softmax's
/// terms were charged 2^16 times their size and the largest budget of a
/// passing case stayed near 0.08.
ImplInfo adapter_info(std::string name, DType d, Features features, Limits limits,
                      std::string description);

/// A copy of the strided tensor `t` of logical shape `shape`, converted to
/// `type` and given `t`'s strides again (gaps included), so torch receives
/// the problem's layout rather than a contiguous copy.
at::Tensor to_torch(const Tensor& t, std::array<int64_t, 4> shape, at::ScalarType type);

/// The keys each query may see through key padding and the explicit mask,
/// AND-ed, as a bool tensor (true = allowed) of shape [B|1][H|1][tq][tk]
/// that broadcasts over [B][H][tq][tk]; undefined when the problem has
/// neither.
at::Tensor allowed_keys(const Problem& p);

/// The elements of `t` (any shape, any dtype) in row-major order, as
/// doubles.
std::vector<double> to_doubles(const at::Tensor& t);

/// True when `p` asks for something every torch call here computes with a
/// fixed value: no window, no softcap, the default scale, and K/V heads
/// equal to query heads. The harness never sends anything else, as the
/// adapters do not declare it; this guards the translation.
bool within_fixed_semantics(const Problem& p);

}  // namespace attncheck::impls::torch_adapters
