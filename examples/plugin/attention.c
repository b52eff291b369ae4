/* A correct scaled dot-product attention in plain C99, exported through
 * attncheck's C ABI (attncheck/plugin.h). Two implementations: one
 * computing in double (empty rows give zero output, weights 0 and lse
 * -inf) and one computing in float (empty rows are an error).
 *
 *   attncheck check --plugin ./libattncheck_example_plugin.so
 *
 * Per query i of (b, h): the allowed keys j (key padding, causal mask and
 * window at the query's position, explicit mask), scores
 * t_j = scale * (q_i . k_j) + bias_ij, a stable softmax over them
 * (subtract the row max, exp, divide by the sum), out_i = sum_j a_j v_j and
 * lse_i = max + log(sum). Inputs are read through their strides.
 *
 * It speaks version 2 of the ABI. Compiled with -DATTNCHECK_USE_V1_HEADER
 * it is a version 1 plugin, built against the frozen attncheck/plugin_v1.h
 * as plugins were before version 2, and must load and give the same
 * results. attncheck's own tests build both, and compile this file once
 * more with -DATTNCHECK_EXAMPLE_BUG, which forgets the scale, to show the
 * check catches it. */
#ifdef ATTNCHECK_USE_V1_HEADER
#include <attncheck/plugin_v1.h>
#else
#include <attncheck/plugin.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef ATTNCHECK_EXAMPLE_BUG
#define EXAMPLE_NAME(suffix) "example_c_bug_" suffix
#else
#define EXAMPLE_NAME(suffix) "example_c_" suffix
#endif

static int64_t offset4(const int64_t* strides, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3];
}

/* Position of query i among the keys, for causal masks and windows. */
static int64_t position(const attncheck_problem* p, int64_t i) {
  return p->align == ATTNCHECK_ALIGN_BOTTOM_RIGHT ? i + p->tk - p->tq : i;
}

static int allowed(const attncheck_problem* p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t pos = position(p, i);
  if (p->key_valid && !p->key_valid[b * p->tk + j]) return 0;
  if (p->causal && j > pos) return 0;
  if (p->window_left >= 0 && j < pos - p->window_left) return 0;
  if (p->window_right >= 0 && j > pos + p->window_right) return 0;
  if (p->mask && !p->mask[offset4(p->mask_strides, b, h, i, j)]) return 0;
  return 1;
}

/* The forward pass in the element type T (double or float), written once
 * as a macro so both formats share it; `empty_is_error` selects the
 * empty-row policy. */
#define DEFINE_FORWARD(NAME, T, EXP, LOG, EMPTY_IS_ERROR)                          \
  static int NAME(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {  \
    const T* q = (const T*)p->q;                                                   \
    const T* k = (const T*)p->k;                                                   \
    const T* v = (const T*)p->v;                                                   \
    T* out = (T*)o->out;                                                           \
    T* s = (T*)malloc((size_t)p->tk * sizeof(T));                                  \
    unsigned char* ok = (unsigned char*)malloc((size_t)p->tk);                     \
    const int64_t group = p->heads / p->kv_heads;                                  \
    const T scale = SCALE_OF(T, p->scale);                                         \
    int64_t b, h, i, j, d;                                                         \
    (void)ctx;                                                                     \
    if (!s || !ok) {                                                               \
      free(s);                                                                     \
      free(ok);                                                                    \
      snprintf(o->error, sizeof o->error, "out of memory (tk = %lld)",            \
               (long long)p->tk);                                                  \
      return ATTNCHECK_ERROR;                                                      \
    }                                                                              \
    for (b = 0; b < p->batch; ++b) {                                               \
      for (h = 0; h < p->heads; ++h) {                                             \
        const int64_t g = h / group;                                               \
        for (i = 0; i < p->tq; ++i) {                                              \
          const int64_t row = (b * p->heads + h) * p->tq + i;                      \
          T m = 0, l = 0;                                                          \
          int any = 0;                                                             \
          for (j = 0; j < p->tk; ++j) {                                            \
            T dot = 0;                                                             \
            ok[j] = (unsigned char)allowed(p, b, h, i, j);                         \
            if (!ok[j]) continue;                                                  \
            for (d = 0; d < p->dk; ++d) {                                          \
              dot += q[offset4(p->q_strides, b, h, i, d)] *                        \
                     k[offset4(p->k_strides, b, g, j, d)];                         \
            }                                                                      \
            s[j] = scale * dot;                                                    \
            if (p->bias) s[j] += (T)p->bias[offset4(p->bias_strides, b, h, i, j)]; \
            m = (!any || s[j] > m) ? s[j] : m;                                     \
            any = 1;                                                               \
          }                                                                        \
          if (!any && EMPTY_IS_ERROR) {                                            \
            snprintf(o->error, sizeof o->error,                                    \
                     "query (b=%lld, h=%lld, i=%lld) has no allowed key",          \
                     (long long)b, (long long)h, (long long)i);                    \
            free(s);                                                               \
            free(ok);                                                              \
            return ATTNCHECK_ERROR;                                                \
          }                                                                        \
          for (j = 0; j < p->tk; ++j) {                                            \
            if (!ok[j]) continue;                                                  \
            s[j] = EXP(s[j] - m);                                                  \
            l += s[j];                                                             \
          }                                                                        \
          for (j = 0; j < p->tk; ++j) {                                            \
            s[j] = ok[j] ? s[j] / l : (T)0;                                        \
            if (o->weights) o->weights[row * p->tk + j] = (double)s[j];            \
          }                                                                        \
          for (d = 0; d < p->dv; ++d) {                                            \
            T acc = 0;                                                             \
            for (j = 0; j < p->tk; ++j) {                                          \
              if (ok[j]) acc += s[j] * v[offset4(p->v_strides, b, g, j, d)];       \
            }                                                                      \
            out[offset4(o->out_strides, b, h, i, d)] = acc;                        \
          }                                                                        \
          if (o->lse) o->lse[row] = any ? (double)(m + LOG(l)) : -HUGE_VAL;        \
        }                                                                          \
      }                                                                            \
    }                                                                              \
    free(s);                                                                       \
    free(ok);                                                                      \
    return ATTNCHECK_OK;                                                           \
  }

#ifdef ATTNCHECK_EXAMPLE_BUG
#define SCALE_OF(T, x) ((void)(x), (T)1) /* the bug: the scale is forgotten */
#else
#define SCALE_OF(T, x) ((T)(x))
#endif

DEFINE_FORWARD(forward_f64, double, exp, log, 0)
DEFINE_FORWARD(forward_f32, float, expf, logf, 1)

#define EXAMPLE_FEATURES                                                          \
  (ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW | \
   ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_BIAS | ATTNCHECK_FEATURE_GQA |          \
   ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_LSE |    \
   ATTNCHECK_FEATURE_ALIGN_TOP_LEFT | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT |           \
   ATTNCHECK_FEATURE_SCALE)

/* Version 2's fields: the array stride, S not rounded before the softmax
 * (s_cast = accum), flushing as precision.flush_to_zero says, and q = kv =
 * out in each dtypes format. */
#ifdef ATTNCHECK_USE_V1_HEADER
#define EXAMPLE_V2_FIELDS(FORMAT)
#else
#define EXAMPLE_V2_FIELDS(FORMAT) \
  , .struct_size = sizeof(attncheck_impl), .s_cast = (FORMAT), .ftz_formats = 0, \
    .n_combos = 0, .combos = NULL
#endif

/* Each computes in its own format in one pass with the C library's exp,
 * which glibc keeps within 1 ulp; nothing is flushed to zero; no limits. */
#define EXAMPLE_IMPL(SUFFIX, FORMAT, EMPTY_ROWS, FORWARD)                                 \
  {.abi_version = ATTNCHECK_ABI_VERSION,                                                  \
   .name = EXAMPLE_NAME(SUFFIX),                                                          \
   .dtypes = 1u << (FORMAT),                                                              \
   .features = EXAMPLE_FEATURES,                                                          \
   .empty_rows = (EMPTY_ROWS),                                                            \
   .precision = {.accum = (FORMAT), .p_cast = (FORMAT), .exp_ulps = 1, .flush_to_zero = 0, \
                 .key_block = 0},                                                         \
   .limits = {0, 0, 0, 0, 0, 0, 0},                                                       \
   .forward = (FORWARD),                                                                  \
   .backward = NULL,                                                                      \
   .ctx = NULL EXAMPLE_V2_FIELDS(FORMAT)}

static const attncheck_impl kImpls[] = {
    EXAMPLE_IMPL("f64", ATTNCHECK_F64, ATTNCHECK_EMPTY_ROW_ZERO, forward_f64),
    EXAMPLE_IMPL("f32", ATTNCHECK_F32, ATTNCHECK_EMPTY_ROW_ERROR, forward_f32),
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
