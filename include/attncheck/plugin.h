/* attncheck C ABI, version 2: the stable contract between the harness and
 * out-of-tree implementations (SPEC section 5.1). Plain C, no C++ types.
 * A plugin is a shared library exporting
 *
 *   const attncheck_impl* attncheck_plugin_impls(size_t* count);
 *
 * which returns a static array of *count descriptors, all of one
 * abi_version. Version 2 only appends: every version 1 field keeps its
 * offset, attncheck_precision is unchanged, and the descriptor, problem and
 * grads grow at their end. Plugins built against version 1 (the frozen
 * attncheck/plugin_v1.h) keep loading: the harness reads abi_version first
 * and uses that version's layout. */
#ifndef ATTNCHECK_PLUGIN_H_
#define ATTNCHECK_PLUGIN_H_

#ifdef ATTNCHECK_PLUGIN_V1_PLAIN_NAMES_
#error "attncheck/plugin_v1.h already declared the version 1 names: include one of the two, or define ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY before plugin_v1.h"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNCHECK_ABI_VERSION 2u

/* dtypes: of q, k, v, out, dout, dq, dk, dv */
#define ATTNCHECK_F64  0u
#define ATTNCHECK_F32  1u
#define ATTNCHECK_BF16 2u
#define ATTNCHECK_F16  3u
/* fp8 storage formats, version 2: inputs only (q_dtype, kv_dtype), never
   the output's. E4M3 is OCP "FN": 3 mantissa bits, no infinities, largest
   448; E5M2: 2 mantissa bits, IEEE infinities and NaN, largest 57344. */
#define ATTNCHECK_E4M3 4u
#define ATTNCHECK_E5M2 5u
/* Block-quantized K/V storage (SPEC 1.2), appended to version 2: ggml's
   blocks of 32 values along the head dimension. Q8_0 (34 bytes): an f16
   scale d, then 32 int8 q_t; value d * q_t. Q4_0 (18 bytes): an f16 scale
   d, then 16 bytes of nibbles, element t < 16 the low nibble of byte t,
   element t >= 16 the high nibble of byte t - 16; value d * (nibble - 8).
   kv_dtype only (Q8_0 also as q_cast); dk and dv multiples of 32. */
#define ATTNCHECK_Q8_0 6u
#define ATTNCHECK_Q4_0 7u

#define ATTNCHECK_ALIGN_TOP_LEFT     0u
#define ATTNCHECK_ALIGN_BOTTOM_RIGHT 1u

#define ATTNCHECK_EMPTY_ROW_ERROR 0u
#define ATTNCHECK_EMPTY_ROW_ZERO  1u

#define ATTNCHECK_OK          0 /* forward/backward return codes */
#define ATTNCHECK_ERROR       1 /* a reported error, message in error[] */
#define ATTNCHECK_UNSUPPORTED 2 /* this combination is not supported:
                                   the case is discarded and counted */

/* feature bits an implementation declares; the harness only generates
   problems inside them */
#define ATTNCHECK_FEATURE_KEY_VALID          (1u << 0)
#define ATTNCHECK_FEATURE_CAUSAL             (1u << 1)
#define ATTNCHECK_FEATURE_WINDOW             (1u << 2)
#define ATTNCHECK_FEATURE_MASK               (1u << 3)
#define ATTNCHECK_FEATURE_BIAS               (1u << 4)
#define ATTNCHECK_FEATURE_GQA                (1u << 5)
#define ATTNCHECK_FEATURE_STRIDES            (1u << 6) /* any q/k/v/out strides */
#define ATTNCHECK_FEATURE_WEIGHTS            (1u << 7)
#define ATTNCHECK_FEATURE_LSE                (1u << 8)
#define ATTNCHECK_FEATURE_BACKWARD           (1u << 9)
#define ATTNCHECK_FEATURE_SOFTCAP            (1u << 10)
#define ATTNCHECK_FEATURE_ALIGN_TOP_LEFT     (1u << 11)
#define ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT (1u << 12)
#define ATTNCHECK_FEATURE_SCALE              (1u << 13) /* honours a scale other
                                                           than the default */
#define ATTNCHECK_FEATURE_NONDETERMINISTIC   (1u << 14)
/* version 2 */
#define ATTNCHECK_FEATURE_SINK        (1u << 15) /* a per-head logit sink */
#define ATTNCHECK_FEATURE_PACKED      (1u << 16) /* cu_seqlens for q and k/v */
#define ATTNCHECK_FEATURE_PAGED_KV    (1u << 17) /* k/v in pages, block_table */
#define ATTNCHECK_FEATURE_DESCALE     (1u << 18) /* per-tensor descales */

/* ftz_formats bits of a version 2 descriptor: which formats flush. A
   flushing format may turn any exp result or product below twice its
   smallest normal into 0 (SPEC 4: vectorised exps return 0 for small
   normals too, not only for subnormals); the tolerance then allows an
   absolute error of twice the smallest normal there. Nothing flushed above
   that is covered: an exp that returns 0 below 2^-100 in f32 is a bug
   whatever is declared. */
#define ATTNCHECK_FTZ_ACCUM  (1u << 0) /* the accumulation format's: exp
                                          results, P, the products p_j v_j */
#define ATTNCHECK_FTZ_P_CAST (1u << 1) /* P's, after its cast */
#define ATTNCHECK_FTZ_OUT    (1u << 2) /* the output's */
#define ATTNCHECK_FTZ_PV_ACCUM (1u << 3) /* pv_accum's (precision by stage,
                                            below), when declared */

/* Precision by stage (SPEC 4.1), appended to version 2: a descriptor built
   against an older version 2 header has a smaller struct_size, and the
   harness reads these fields only where struct_size covers them. */
#define ATTNCHECK_STAGE_Q_CAST        (1u << 0)
#define ATTNCHECK_STAGE_SCORE_ACCUM   (1u << 1)
#define ATTNCHECK_STAGE_SOFTMAX_ACCUM (1u << 2)
#define ATTNCHECK_STAGE_PV_ACCUM      (1u << 3)
/* q_cast: Q rounded to the call's kv_dtype (Q8_0 for a block-quantized
   kv_dtype, as ggml does; none when that is F64). */
#define ATTNCHECK_Q_CAST_KV 8u

typedef struct attncheck_problem {
  uint32_t abi_version;             /* ATTNCHECK_ABI_VERSION */
  uint32_t dtype;                   /* of q, k, v, out, dout, dq, dk, dv */
  int64_t batch, heads, kv_heads, tq, tk, dk, dv;
  const void* q; int64_t q_strides[4]; /* [b][h][t][d], in elements */
  const void* k; int64_t k_strides[4]; /* [b][kv_h][t][d] */
  const void* v; int64_t v_strides[4];
  const uint8_t* key_valid;         /* [batch][tk], 1 = allowed; NULL = all */
  const uint8_t* mask; int64_t mask_strides[4]; /* [b][h][i][j], stride 0
                                       broadcasts; 1 = allowed; NULL = none */
  const double* bias; int64_t bias_strides[4]; /* additive, finite,
                                       representable in dtype; NULL = none */
  uint32_t causal;                  /* 0 or 1 */
  uint32_t align;                   /* ATTNCHECK_ALIGN_*, for causal and window */
  int64_t window_left, window_right; /* -1 = unbounded */
  double scale;                     /* multiplies q.k */
  double softcap;                   /* 0 = off */
  /* version 2: a version 1 plugin receives a version 1 problem, which ends
     above, and never one that needs the fields below */
  uint32_t q_dtype;                 /* format of q (dtype: out, dout and
                                       gradients) */
  uint32_t kv_dtype;                /* format of k and v */
  double q_descale;                 /* logical q = stored q * q_descale; 1 = none */
  double k_descale;                 /* likewise for k; 1 = none */
  double v_descale;                 /* likewise for v; 1 = none */
  const double* sink;               /* [heads] logit sinks, or NULL */
  const int64_t* cu_seqlens_q;      /* [batch + 1] offsets of packed queries,
                                       or NULL (dense queries) */
  const int64_t* cu_seqlens_k;      /* [batch + 1] offsets of packed keys, or
                                       NULL (dense or paged keys) */
  const int64_t* seqlens_k;         /* [batch] keys per sequence, paged only */
  const int64_t* block_table;       /* [batch][block_table_stride] pages of
                                       each sequence, or NULL (not paged) */
  int64_t block_table_stride;       /* row length of block_table */
  int64_t page_size;                /* key slots per page */
  int64_t num_pages;                /* pages in k and v: [page][kv_h][slot][d] */
} attncheck_problem;

/* Weights: P normalised, either before or after its p_cast (the values
   P . V used, or the unrounded ones: batched_bf16 returns P before the
   cast, eager_bf16 after, as eager framework code does). Both are judged
   alike: every weight's tolerance carries the cast's relative error
   (u of p_cast) and its underflow (half the smallest subnormal of p_cast,
   twice the smallest normal if it flushes), which a weight before the cast
   does not use up. Unnormalised P (exp(s - m) without the division by the
   row sum) is wrong either way. */
typedef struct attncheck_outputs {
  void* out; int64_t out_strides[4]; /* [b][h][tq][dv], dtype */
  double* weights;                  /* [b][h][tq][tk] contiguous, or NULL:
                                       P before or after its p_cast (above) */
  double* lse;                      /* [b][h][tq] contiguous, or NULL */
  char error[256];                  /* message when a call returns != 0 */
} attncheck_outputs;

typedef struct attncheck_grads {
  const void* dout; int64_t dout_strides[4]; /* [b][h][tq][dv] */
  void* dq;                         /* [b][h][tq][dk] contiguous, dtype */
  void* dk;                         /* [b][kv_h][tk][dk] contiguous */
  void* dv;                         /* [b][kv_h][tk][dv] contiguous */
  /* version 2 */
  double* dsink;                    /* [heads], when the problem has a sink */
} attncheck_grads;

/* Frozen at its version 1 layout: it sits inside the descriptor. */
typedef struct attncheck_precision {
  uint32_t accum;                   /* dtype of score / sum accumulation */
  uint32_t p_cast;                  /* dtype P is rounded to before P.V
                                       (= accum when not cast) */
  uint32_t exp_ulps;                /* error of the exp used, in ulps of
                                       accum (0 = correctly rounded); also
                                       bounds tanh's with a softcap. For an
                                       exp whose error grows with |x|,
                                       declare the largest error over every
                                       argument the kernel passes it:
                                       s - m from 0 down to where exp's
                                       result leaves accum's normal range
                                       (about -87.3 in f32, -708.4 in f64;
                                       -103.3 and -744.4 while subnormal
                                       results are kept), and the rescale
                                       exps of an online softmax. An exp
                                       within 2 ulps near 0 and 6 near -87
                                       declares 6: each weight is judged by
                                       its own relative bound, and the
                                       smallest weights are the ones whose
                                       exp erred most. */
  uint32_t flush_to_zero;           /* 1 if every format flushes results
                                       below twice its smallest normal
                                       (version 1; a version 2 descriptor's
                                       ftz_formats says which) */
  int64_t key_block;                /* online-softmax block size; 0 = one pass */
} attncheck_precision;

typedef struct attncheck_limits {   /* 0 = no limit */
  int64_t max_tq, max_tk, max_batch_heads;
  int64_t dk_min, dk_max, dk_multiple;
  uint32_t dv_equals_dk;            /* 1 if dv must equal dk */
} attncheck_limits;

/* The format of each stage of the arithmetic (SPEC 4.1). A field whose
   bit is clear in `set` is precision.accum (q_cast: Q is not rounded), so
   a zero-filled struct means what a descriptor without stages means. */
typedef struct attncheck_stages {
  uint32_t set;                     /* ATTNCHECK_STAGE_* of the fields below
                                       that are declared */
  uint32_t q_cast;                  /* Q, after its descale, rounded before
                                       q.k: a dtype or ATTNCHECK_Q_CAST_KV */
  uint32_t score_accum;             /* the q.k sums */
  uint32_t softmax_accum;           /* scale, max, exp, the sum l, the
                                       rescales of an online softmax;
                                       exp_ulps counts its ulps */
  uint32_t pv_accum;                /* the P.V accumulator, its rescales and
                                       the final division */
} attncheck_stages;

/* One dispatch path of a kernel (SPEC 4.1): a named precision. */
typedef struct attncheck_path {
  uint32_t struct_size;             /* sizeof(attncheck_path) as compiled:
                                       the stride of the paths array */
  const char* name;                 /* [a-z0-9_.-]+, unique in the descriptor */
  attncheck_precision precision;
  uint32_t s_cast;                  /* as the descriptor's */
  uint32_t ftz_formats;             /* as the descriptor's */
  attncheck_stages stages;
} attncheck_path;

/* One supported combination of formats (version 2). */
typedef struct attncheck_dtype_combo {
  uint32_t q_dtype;                 /* format of q */
  uint32_t kv_dtype;                /* format of k and v */
  uint32_t out_dtype;               /* format of out, dout and the gradients:
                                       F64, F32, BF16 or F16 */
} attncheck_dtype_combo;

typedef struct attncheck_impl {
  uint32_t abi_version;
  const char* name;                 /* unique, [a-z0-9_.-]+ */
  uint32_t dtypes;                  /* bit (1u << dtype) per supported dtype */
  uint32_t features;                /* ATTNCHECK_FEATURE_* */
  uint32_t empty_rows;              /* ATTNCHECK_EMPTY_ROW_* */
  attncheck_precision precision;    /* what the tolerance is derived from */
  attncheck_limits limits;
  /* return ATTNCHECK_OK, ATTNCHECK_ERROR (outputs->error set) or
     ATTNCHECK_UNSUPPORTED */
  int (*forward)(void* ctx, const attncheck_problem*, attncheck_outputs*);
  /* or NULL; outputs carries only the error message */
  int (*backward)(void* ctx, const attncheck_problem*, attncheck_grads*,
                  attncheck_outputs*);
  void* ctx;
  /* version 2: every field above keeps its version 1 offset */
  uint32_t struct_size;             /* sizeof(attncheck_impl) as compiled: the
                                       array stride */
  uint32_t s_cast;                  /* format S is rounded to before softmax
                                       (= precision.accum when not cast) */
  uint32_t ftz_formats;             /* ATTNCHECK_FTZ_* whose subnormals are
                                       flushed; 0 = precision.flush_to_zero
                                       decides for all */
  uint32_t n_combos;                /* entries of combos; 0: q = kv = out for
                                       each dtypes bit */
  const attncheck_dtype_combo* combos; /* every supported {q, kv, out}; with
                                       combos, dtypes must be 0 or the formats
                                       d whose {d, d, d} is listed */
  /* appended to version 2 (precision by stage and by path, SPEC 4.1);
     read only where struct_size covers them */
  attncheck_stages stages;          /* of the descriptor's own precision */
  uint32_t n_paths;                 /* entries of paths */
  const attncheck_path* paths;      /* or NULL. The descriptor's own
                                       precision must be as loose as every
                                       path's in every component: a call
                                       that names no path is judged by it */
  int32_t (*last_path)(void* ctx);  /* or NULL: the index into paths of the
                                       path the latest forward on ctx took,
                                       -1 = not said; called after each
                                       forward that returns ATTNCHECK_OK */
} attncheck_impl;

/* ---- Rounding helpers for plugin authors ----
   Round to nearest, ties to even, as IEEE 754 and attncheck's oracle round
   (the harness's own round_to agrees on every float: tests/core/
   test_plugin_rounding.cpp). A bf16 or f16 tensor (q, k, v, out, ...) holds
   the formats' 16-bit patterns: *_bits converts a float to one, *_value
   back, attncheck_round_* rounds a float to the format and back (what a
   kernel does to store or to accumulate in bf16 or f16). NaN stays NaN;
   a float beyond the format's range becomes infinity (bf16's range is
   float's). */
static inline uint16_t attncheck_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float attncheck_bf16_value(uint16_t bits) {
  const uint32_t u = (uint32_t)bits << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static inline float attncheck_round_bf16(float x) { return attncheck_bf16_value(attncheck_bf16_bits(x)); }

static inline uint16_t attncheck_f16_bits(float x) {
  uint32_t u, a, r, e, m, shift, q, rem, half;
  uint16_t sign;
  memcpy(&u, &x, sizeof u);
  sign = (uint16_t)((u >> 16) & 0x8000u);
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* from 65520 (a tie): infinity */
  if (a >= 0x38800000u) {                                    /* normal: from 2^-14 */
    r = a - 0x38000000u;                                     /* exponent bias 127 -> 15 */
    r += 0x0fffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;                         /* up to 2^-25 (a tie): zero */
  /* Subnormal: the significand in units of 2^-24, rounded. */
  e = a >> 23;
  m = (a & 0x7fffffu) | 0x800000u;
  shift = 126u - e;
  q = m >> shift;
  rem = m & ((1u << shift) - 1u);
  half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return (uint16_t)(sign | q);
}

static inline float attncheck_f16_value(uint16_t bits) {
  const uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
  const uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
  uint32_t u;
  float x;
  if (e == 0x1fu) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e != 0) {
    u = sign | ((e + 112u) << 23) | (m << 13);
  } else {
    x = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
    memcpy(&u, &x, sizeof u);
    u |= sign;
  }
  memcpy(&x, &u, sizeof x);
  return x;
}

static inline float attncheck_round_f16(float x) { return attncheck_f16_value(attncheck_f16_bits(x)); }

/* The one symbol a plugin exports. */
typedef const attncheck_impl* (*attncheck_plugin_impls_fn)(size_t* count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNCHECK_PLUGIN_H_ */
