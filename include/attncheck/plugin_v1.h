/* attncheck C ABI, version 1, frozen: the header plugins were built against
 * before version 2 (SPEC 5.1 "ABI version 2"). Never edit it: the harness
 * reads version 1 descriptors and builds version 1 problems through these
 * structs, and tests build plugins against it.
 *
 * Included alone it is the version 1 plugin.h, names and all: a version 1
 * plugin's source compiles against it unchanged. Code that needs both
 * versions at once (the harness, the C ABI test) defines
 * ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY before including it: the types are then
 * attncheck_v1_problem, attncheck_v1_impl, ... and the version
 * ATTNCHECK_V1_ABI_VERSION, beside plugin.h's. The constants are spelled as
 * in plugin.h, so both headers may define them.
 *
 * A plugin is a shared library exporting
 *
 *   const attncheck_impl* attncheck_plugin_impls(size_t* count);
 *
 * which returns a static array of *count descriptors. */
#ifndef ATTNCHECK_PLUGIN_V1_H_
#define ATTNCHECK_PLUGIN_V1_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNCHECK_V1_ABI_VERSION 1u

#ifdef ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY
#define ATTNCHECK_V1_NAME(name) attncheck_v1_##name
#else
#if defined(ATTNCHECK_PLUGIN_H_)
#error "attncheck/plugin.h is included: define ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY before attncheck/plugin_v1.h"
#endif
/* Marks the version 1 names as taken, for plugin.h's check. */
#define ATTNCHECK_PLUGIN_V1_PLAIN_NAMES_
#define ATTNCHECK_ABI_VERSION 1u
#define ATTNCHECK_V1_NAME(name) attncheck_##name
#endif

/* dtypes: of q, k, v, out, dout, dq, dk, dv */
#define ATTNCHECK_F64  0u
#define ATTNCHECK_F32  1u
#define ATTNCHECK_BF16 2u
#define ATTNCHECK_F16  3u

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

typedef struct ATTNCHECK_V1_NAME(problem) {
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
} ATTNCHECK_V1_NAME(problem);

typedef struct ATTNCHECK_V1_NAME(outputs) {
  void* out; int64_t out_strides[4]; /* [b][h][tq][dv], dtype */
  double* weights;                  /* [b][h][tq][tk] contiguous, or NULL */
  double* lse;                      /* [b][h][tq] contiguous, or NULL */
  char error[256];                  /* message when a call returns != 0 */
} ATTNCHECK_V1_NAME(outputs);

typedef struct ATTNCHECK_V1_NAME(grads) {
  const void* dout; int64_t dout_strides[4]; /* [b][h][tq][dv] */
  void* dq;                         /* [b][h][tq][dk] contiguous, dtype */
  void* dk;                         /* [b][kv_h][tk][dk] contiguous */
  void* dv;                         /* [b][kv_h][tk][dv] contiguous */
} ATTNCHECK_V1_NAME(grads);

typedef struct ATTNCHECK_V1_NAME(precision) {
  uint32_t accum;                   /* dtype of score / sum accumulation */
  uint32_t p_cast;                  /* dtype P is rounded to before P.V
                                       (= accum when not cast) */
  uint32_t exp_ulps;                /* error of the exp used, in ulps of
                                       accum (0 = correctly rounded) */
  uint32_t flush_to_zero;           /* 1 if subnormals are flushed */
  int64_t key_block;                /* online-softmax block size; 0 = one pass */
} ATTNCHECK_V1_NAME(precision);

typedef struct ATTNCHECK_V1_NAME(limits) {   /* 0 = no limit */
  int64_t max_tq, max_tk, max_batch_heads;
  int64_t dk_min, dk_max, dk_multiple;
  uint32_t dv_equals_dk;            /* 1 if dv must equal dk */
} ATTNCHECK_V1_NAME(limits);

typedef struct ATTNCHECK_V1_NAME(impl) {
  uint32_t abi_version;
  const char* name;                 /* unique, [a-z0-9_.-]+ */
  uint32_t dtypes;                  /* bit (1u << dtype) per supported dtype */
  uint32_t features;                /* ATTNCHECK_FEATURE_* */
  uint32_t empty_rows;              /* ATTNCHECK_EMPTY_ROW_* */
  ATTNCHECK_V1_NAME(precision) precision;    /* what the tolerance is derived from */
  ATTNCHECK_V1_NAME(limits) limits;
  /* return ATTNCHECK_OK, ATTNCHECK_ERROR (outputs->error set) or
     ATTNCHECK_UNSUPPORTED */
  int (*forward)(void* ctx, const ATTNCHECK_V1_NAME(problem)*, ATTNCHECK_V1_NAME(outputs)*);
  /* or NULL; outputs carries only the error message */
  int (*backward)(void* ctx, const ATTNCHECK_V1_NAME(problem)*, ATTNCHECK_V1_NAME(grads)*,
                  ATTNCHECK_V1_NAME(outputs)*);
  void* ctx;
} ATTNCHECK_V1_NAME(impl);

/* The one symbol a plugin exports. */
typedef const ATTNCHECK_V1_NAME(impl)* (*ATTNCHECK_V1_NAME(plugin_impls_fn))(size_t* count);

#undef ATTNCHECK_V1_NAME

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNCHECK_PLUGIN_V1_H_ */
