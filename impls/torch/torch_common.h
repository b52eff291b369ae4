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

/// The ATen scalar type of an attncheck dtype (f64 or f32; the adapters
/// declare no other).
at::ScalarType scalar_type(DType d);

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
