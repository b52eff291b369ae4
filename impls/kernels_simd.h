#pragma once
// The float building blocks the batched, online and local kernels share for
// speed: a packed matrix product, a vectorised exp, dot products. Each has an
// AVX2+FMA body selected at run time (function target attributes, so the
// shipped build needs no -march flag) and a portable body for other CPUs.
// Every body keeps the error the kernels' precision traits declare: products
// accumulate in float (any order, as SPEC 4's bound allows), and exp stays
// within 1 ulp.

#include <cstdint>
#include <vector>

namespace attncheck::impls::simd {

/// True when the CPU runs AVX2 and FMA (checked once).
bool have_avx2_fma();

/// Columns per panel of a packed right-hand operand.
inline constexpr int64_t kPanel = 16;

/// A right-hand operand B (k x n) of a product, stored as ceil(n / 16)
/// panels of k rows x 16 columns each (columns past n are zero), so a
/// product reads 16 consecutive floats per row.
struct Packed {
  std::vector<float> data;
  int64_t k = 0, n = 0;

  /// Offset between consecutive panels.
  int64_t panel_stride() const { return k * kPanel; }
};

/// Packs B[r][c] = src[c * ld + r] (B is the transpose of the n x k matrix
/// at src, e.g. the keys for Q K^T).
void pack_transposed(const float* src, int64_t n, int64_t k, int64_t ld, Packed& out);

/// Packs B[r][c] = src[r * ld + c] (B is the k x n matrix at src, e.g. V).
void pack(const float* src, int64_t k, int64_t n, int64_t ld, Packed& out);

/// C = (accumulate ? C : 0) + A * B[k0 .. k0 + k)[n0 .. n0 + n), with A
/// m x k (row stride lda), C m x n (row stride ldc) and n0 a multiple of 16.
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const Packed& b,
          int64_t k0, int64_t n0, float* c, int64_t ldc, bool accumulate);

/// x[j] = exp(x[j] - shift) for j < n, each within 1 ulp of the exact
/// value (the vector body evaluates exp in double and rounds once, so its
/// error is below 0.51 ulp; the portable body is the C library's expf,
/// within 1 ulp). exp(-inf) is exactly 0; NaN stays NaN.
void exp_shifted(float* x, int64_t n, float shift);

/// x[j] = exp((x[j] - ref) + shift) for j < n, the argument formed in
/// double (x[j] - ref exact unless the two are more than 2^29 apart, then
/// within 2^-53 relative; one more rounding of 2^-53 for + shift) and the
/// exp evaluated as exp_shifted's, rounded to float once: within 0.51 ulp
/// of e^((x[j] - ref) + shift) in the vector body, and within 1 ulp of it
/// in the portable one (the C library's exp in double, then the rounding to
/// float). exp(-inf) is exactly 0; NaN stays NaN.
void exp_rebased(float* x, int64_t n, float ref, double shift);

/// The largest of x[0 .. n), n >= 1 (NaN ignored unless all are NaN).
float max_of(const float* x, int64_t n);

/// sum_j x[j], in float, any order.
float sum_of(const float* x, int64_t n);

/// sum_d a[d] * b[d], in float, any order.
float dot(const float* a, const float* b, int64_t n);

}  // namespace attncheck::impls::simd
