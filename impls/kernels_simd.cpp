#include "kernels_simd.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace attncheck::impls::simd {
namespace {

#define ATTNCHECK_AVX2 __attribute__((target("avx2,fma")))

// Rows of A per micro-tile: 6 rows x 16 columns use 12 of the 16 ymm
// registers for C, leaving room for two B vectors and a broadcast.
constexpr int64_t kRows = 6;
// Rows of B per pass: a 256 x 16 float panel slice (16 KiB) stays in L1.
constexpr int64_t kDepth = 256;

// Stores one row of a C tile: 16 columns, or the first ncols of them.
ATTNCHECK_AVX2 inline void store_row(float* row, __m256 lo, __m256 hi, int64_t ncols, bool accumulate) {
  if (ncols == kPanel) {
    if (accumulate) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(row));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, lo);
    _mm256_storeu_ps(row + 8, hi);
    return;
  }
  alignas(32) float tmp[kPanel];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  for (int64_t j = 0; j < ncols; ++j) row[j] = accumulate ? row[j] + tmp[j] : tmp[j];
}

// C tile (MR x ncols) += / = A (MR x kc) * panel slice (kc x 16). The
// accumulators are named variables, not an array, so they stay in
// registers.
template <int MR>
ATTNCHECK_AVX2 void micro_avx2(int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
                               int64_t ldc, int64_t ncols, bool accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(bp + k * kPanel);
    const __m256 b1 = _mm256_loadu_ps(bp + k * kPanel + 8);
    const float* ak = a + k;
    __m256 ar = _mm256_broadcast_ss(ak);
    c00 = _mm256_fmadd_ps(ar, b0, c00);
    c01 = _mm256_fmadd_ps(ar, b1, c01);
    if constexpr (MR > 1) {
      ar = _mm256_broadcast_ss(ak + lda);
      c10 = _mm256_fmadd_ps(ar, b0, c10);
      c11 = _mm256_fmadd_ps(ar, b1, c11);
    }
    if constexpr (MR > 2) {
      ar = _mm256_broadcast_ss(ak + 2 * lda);
      c20 = _mm256_fmadd_ps(ar, b0, c20);
      c21 = _mm256_fmadd_ps(ar, b1, c21);
    }
    if constexpr (MR > 3) {
      ar = _mm256_broadcast_ss(ak + 3 * lda);
      c30 = _mm256_fmadd_ps(ar, b0, c30);
      c31 = _mm256_fmadd_ps(ar, b1, c31);
    }
    if constexpr (MR > 4) {
      ar = _mm256_broadcast_ss(ak + 4 * lda);
      c40 = _mm256_fmadd_ps(ar, b0, c40);
      c41 = _mm256_fmadd_ps(ar, b1, c41);
    }
    if constexpr (MR > 5) {
      ar = _mm256_broadcast_ss(ak + 5 * lda);
      c50 = _mm256_fmadd_ps(ar, b0, c50);
      c51 = _mm256_fmadd_ps(ar, b1, c51);
    }
  }
  store_row(c, c00, c01, ncols, accumulate);
  if constexpr (MR > 1) store_row(c + ldc, c10, c11, ncols, accumulate);
  if constexpr (MR > 2) store_row(c + 2 * ldc, c20, c21, ncols, accumulate);
  if constexpr (MR > 3) store_row(c + 3 * ldc, c30, c31, ncols, accumulate);
  if constexpr (MR > 4) store_row(c + 4 * ldc, c40, c41, ncols, accumulate);
  if constexpr (MR > 5) store_row(c + 5 * ldc, c50, c51, ncols, accumulate);
}

void micro_portable(int64_t mr, int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
                    int64_t ldc, int64_t ncols, bool accumulate) {
  for (int64_t r = 0; r < mr; ++r) {
    float acc[kPanel] = {};
    for (int64_t k = 0; k < kc; ++k) {
      const float ar = a[r * lda + k];
      for (int64_t j = 0; j < kPanel; ++j) acc[j] += ar * bp[k * kPanel + j];
    }
    float* row = c + r * ldc;
    for (int64_t j = 0; j < ncols; ++j) row[j] = accumulate ? row[j] + acc[j] : acc[j];
  }
}

void micro(int64_t mr, int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
           int64_t ldc, int64_t ncols, bool accumulate, bool avx2) {
  if (!avx2) return micro_portable(mr, kc, a, lda, bp, c, ldc, ncols, accumulate);
  switch (mr) {
    case 6: return micro_avx2<6>(kc, a, lda, bp, c, ldc, ncols, accumulate);
    case 5: return micro_avx2<5>(kc, a, lda, bp, c, ldc, ncols, accumulate);
    case 4: return micro_avx2<4>(kc, a, lda, bp, c, ldc, ncols, accumulate);
    case 3: return micro_avx2<3>(kc, a, lda, bp, c, ldc, ncols, accumulate);
    case 2: return micro_avx2<2>(kc, a, lda, bp, c, ldc, ncols, accumulate);
    default: return micro_avx2<1>(kc, a, lda, bp, c, ldc, ncols, accumulate);
  }
}

// Zeroed storage for ceil(n / 16) panels of k x 16.
float* zeroed_panels(Packed& out, int64_t k, int64_t n) {
  out.k = k;
  out.n = n;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  out.data.assign(static_cast<size_t>(panels * k * kPanel), 0.0f);
  return out.data.data();
}

// exp in double for four floats widened to double: x = n ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor polynomial of degree 10 (truncation
// below 2e-13 relative), times 2^n built in the exponent bits. The double
// result is within 1e-12 relative of e^x, so rounding it to float gives an
// error below 0.5 + 2^24 * 1e-12 < 0.51 ulp. Inputs are clamped to
// [-150, 100]: e^-150 rounds to float 0 (so exp(-inf) is exactly 0) and
// e^100 to float +inf; max/min return their second operand for NaN, so
// NaN passes through.
ATTNCHECK_AVX2 __m128 exp4(__m256d x) {
  x = _mm256_max_pd(_mm256_set1_pd(-150.0), x);
  x = _mm256_min_pd(_mm256_set1_pd(100.0), x);
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 split so n * ln2_hi is exact for |n| < 2^11.
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0.693147180559890330187045037746429443359375), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(5.4979230187083711552420206887059365096458e-14), r);
  __m256d p = _mm256_set1_pd(1.0 / 3628800.0);
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 362880.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 40320.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 5040.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 720.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 120.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 24.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0 / 6.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(0.5));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
  // n + 1.5 * 2^52 holds n in its low mantissa bits (|n| < 2^31).
  const __m256d magic = _mm256_set1_pd(6755399441055744.0);
  const __m256i bits = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(n, magic)),
                                        _mm256_castpd_si256(magic));
  const __m256d scale =
      _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(bits, _mm256_set1_epi64x(1023)), 52));
  return _mm256_cvtpd_ps(_mm256_mul_pd(p, scale));
}

ATTNCHECK_AVX2 void exp_shifted_avx2(float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    // The difference is rounded to float first, as the scalar s_j - m is.
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), s);
    const __m128 lo = exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(d)));
    const __m128 hi = exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)));
    _mm256_storeu_ps(x + j, _mm256_set_m128(hi, lo));
  }
  for (; j < n; ++j) x[j] = std::exp(x[j] - shift);
}

ATTNCHECK_AVX2 void exp_rebased_avx2(float* x, int64_t n, float ref, double shift) {
  const __m256d r = _mm256_set1_pd(static_cast<double>(ref));
  const __m256d s = _mm256_set1_pd(shift);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256d a = _mm256_add_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), r), s);
    const __m256d b = _mm256_add_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), r), s);
    _mm256_storeu_ps(x + j, _mm256_set_m128(exp4(b), exp4(a)));
  }
  for (; j < n; ++j)
    x[j] = static_cast<float>(std::exp((static_cast<double>(x[j]) - static_cast<double>(ref)) + shift));
}

ATTNCHECK_AVX2 float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

ATTNCHECK_AVX2 float sum_avx2(const float* x, int64_t n) {
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    a = _mm256_add_ps(a, _mm256_loadu_ps(x + j));
    b = _mm256_add_ps(b, _mm256_loadu_ps(x + j + 8));
  }
  float s = hsum(_mm256_add_ps(a, b));
  for (; j < n; ++j) s += x[j];
  return s;
}

ATTNCHECK_AVX2 float max_avx2(const float* x, int64_t n) {
  float m = x[0];
  int64_t j = 0;
  if (n >= 8) {
    __m256 v = _mm256_loadu_ps(x);
    for (j = 8; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + j));
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    m = t[0];
    for (int k = 1; k < 8; ++k) m = std::max(m, t[k]);
  }
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

ATTNCHECK_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), s1);
  }
  for (; d + 8 <= n; d += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace

bool have_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

void pack_transposed(const float* src, int64_t n, int64_t k, int64_t ld, Packed& out) {
  float* dst = zeroed_panels(out, k, n);
  for (int64_t c = 0; c < n; ++c) {
    float* panel = dst + (c / kPanel) * out.panel_stride() + c % kPanel;
    for (int64_t r = 0; r < k; ++r) panel[r * kPanel] = src[c * ld + r];
  }
}

void pack(const float* src, int64_t k, int64_t n, int64_t ld, Packed& out) {
  float* dst = zeroed_panels(out, k, n);
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c)
      dst[(c / kPanel) * out.panel_stride() + r * kPanel + c % kPanel] = src[r * ld + c];
}

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const Packed& b,
          int64_t k0, int64_t n0, float* c, int64_t ldc, bool accumulate) {
  const bool avx2 = have_avx2_fma();
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  for (int64_t kb = 0; kb < k; kb += kDepth) {
    const int64_t kc = std::min(kDepth, k - kb);
    const bool acc = accumulate || kb > 0;
    for (int64_t col = 0; col < n; col += kPanel) {
      const int64_t ncols = std::min(kPanel, n - col);
      const float* bp =
          b.data.data() + ((n0 + col) / kPanel) * b.panel_stride() + (k0 + kb) * kPanel;
      for (int64_t i = 0; i < m; i += kRows) {
        micro(std::min(kRows, m - i), kc, a + i * lda + kb, lda, bp, c + i * ldc + col, ldc, ncols,
              acc, avx2);
      }
    }
  }
}

void exp_shifted(float* x, int64_t n, float shift) {
  if (have_avx2_fma()) return exp_shifted_avx2(x, n, shift);
  for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j] - shift);
}

void exp_rebased(float* x, int64_t n, float ref, double shift) {
  if (have_avx2_fma()) return exp_rebased_avx2(x, n, ref, shift);
  for (int64_t j = 0; j < n; ++j)
    x[j] = static_cast<float>(std::exp((static_cast<double>(x[j]) - static_cast<double>(ref)) + shift));
}

float max_of(const float* x, int64_t n) {
  if (have_avx2_fma()) return max_avx2(x, n);
  float m = x[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

float sum_of(const float* x, int64_t n) {
  if (have_avx2_fma()) return sum_avx2(x, n);
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

float dot(const float* a, const float* b, int64_t n) {
  if (have_avx2_fma()) return dot_avx2(a, b, n);
  float s = 0;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace attncheck::impls::simd
