/* A plugin that declares precision by stage and by path (SPEC 4.1, the
 * fields appended to ABI version 2): a correct f64 attention whose
 * descriptors declare stages, two dispatch paths ("short", "tiled") and a
 * last_path that reports path 1 when the call had tq >= 4, else path 0.
 *
 *   two_paths             as above
 *   two_paths_bad_index   its last_path answers 2 (there are 2 paths) when
 *                         tq >= 4: an error of that call
 *   says_no_path          last_path without paths: always -1 (allowed)
 *
 * Compiled with -DNEWER_LAYOUT, every descriptor and path sits in a larger
 * struct, as a plugin built against a later header whose appended fields
 * this harness does not know: struct_size (and each path's) is the larger
 * size, and the loader must read the same declaration at that stride.
 * Designated initializers throughout: positional ones would have to name
 * every appended field. */
#include "attncheck/plugin.h"

#include <math.h>
#include <stdint.h>

/* What the latest forward on a ctx saw. */
typedef struct call_state {
  int64_t tq;
  int32_t paths; /* how many paths the descriptor lists */
} call_state;

static call_state g_two_paths = {0, 2}, g_bad_index = {0, 2}, g_no_path = {0, 0};

/* out = softmax(scale q.k) v in double, contiguous inputs (no STRIDES). */
static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const double* q = (const double*)p->q;
  const double* k = (const double*)p->k;
  const double* v = (const double*)p->v;
  double* out = (double*)o->out;
  int64_t b, h, i, j, d;
  ((call_state*)ctx)->tq = p->tq;
  for (b = 0; b < p->batch; ++b)
    for (h = 0; h < p->heads; ++h) {
      const int64_t g = h / (p->heads / p->kv_heads);
      for (i = 0; i < p->tq; ++i) {
        double m = -INFINITY, l = 0;
        const double* qi = q + b * p->q_strides[0] + h * p->q_strides[1] + i * p->q_strides[2];
        double* oi = out + b * o->out_strides[0] + h * o->out_strides[1] + i * o->out_strides[2];
        for (j = 0; j < p->tk; ++j) {
          const double* kj = k + b * p->k_strides[0] + g * p->k_strides[1] + j * p->k_strides[2];
          double s = 0;
          for (d = 0; d < p->dk; ++d) s += qi[d * p->q_strides[3]] * kj[d * p->k_strides[3]];
          s *= p->scale;
          if (s > m) m = s;
        }
        for (d = 0; d < p->dv; ++d) oi[d * o->out_strides[3]] = 0;
        for (j = 0; j < p->tk; ++j) {
          const double* kj = k + b * p->k_strides[0] + g * p->k_strides[1] + j * p->k_strides[2];
          const double* vj = v + b * p->v_strides[0] + g * p->v_strides[1] + j * p->v_strides[2];
          double s = 0, e;
          for (d = 0; d < p->dk; ++d) s += qi[d * p->q_strides[3]] * kj[d * p->k_strides[3]];
          e = exp(s * p->scale - m);
          l += e;
          for (d = 0; d < p->dv; ++d) oi[d * o->out_strides[3]] += e * vj[d * p->v_strides[3]];
        }
        for (d = 0; d < p->dv; ++d) oi[d * o->out_strides[3]] /= l;
      }
    }
  return ATTNCHECK_OK;
}

/* Path 1 from 4 queries, else path 0; -1 without paths. */
static int32_t last_path(void* ctx) {
  const call_state* s = (const call_state*)ctx;
  if (s->paths == 0) return -1;
  return s->tq >= 4 ? 1 : 0;
}

/* Like last_path, but one past the last path from 4 queries. */
static int32_t last_path_out_of_range(void* ctx) {
  const call_state* s = (const call_state*)ctx;
  return s->tq >= 4 ? s->paths : 0;
}

#ifdef NEWER_LAYOUT
/* A later header's structs: ours, then fields this harness does not know. */
typedef struct {
  attncheck_path path;
  uint64_t appended_later;
} path_entry;
typedef struct {
  attncheck_impl impl;
  uint64_t appended_later[3];
} impl_entry;
#define PATH(...) {.path = {__VA_ARGS__}, .appended_later = 0x5a5a5a5aU}
#define IMPL(...) {.impl = {__VA_ARGS__}, .appended_later = {1, 2, 3}}
#else
typedef attncheck_path path_entry;
typedef attncheck_impl impl_entry;
#define PATH(...) {__VA_ARGS__}
#define IMPL(...) {__VA_ARGS__}
#endif

/* "short": exact f64 arithmetic, one pass, Q not rounded. "tiled": f32
   scores and P.V, Q rounded to the call's K/V format, blocks of 64 keys. */
static const path_entry kPaths[] = {
    PATH(.struct_size = sizeof(path_entry), .name = "short",
         .precision = {.accum = ATTNCHECK_F64, .p_cast = ATTNCHECK_F64},
         .s_cast = ATTNCHECK_F64,
         .stages = {.set = ATTNCHECK_STAGE_SCORE_ACCUM, .score_accum = ATTNCHECK_F64}),
    PATH(.struct_size = sizeof(path_entry), .name = "tiled",
         .precision = {.accum = ATTNCHECK_F32, .p_cast = ATTNCHECK_F32, .exp_ulps = 2,
                       .key_block = 64},
         .s_cast = ATTNCHECK_F32,
         .stages = {.set = ATTNCHECK_STAGE_Q_CAST | ATTNCHECK_STAGE_SCORE_ACCUM |
                           ATTNCHECK_STAGE_PV_ACCUM,
                    .q_cast = ATTNCHECK_Q_CAST_KV,
                    .score_accum = ATTNCHECK_F32,
                    .pv_accum = ATTNCHECK_F32}),
};

/* The descriptor's own precision is the loosest of the two in every
   component: a call that names no path is judged by it. */
#define TWO_PATHS(NAME, LAST_PATH, CTX)                                                       \
  IMPL(.abi_version = ATTNCHECK_ABI_VERSION, .name = NAME, .dtypes = 1u << ATTNCHECK_F64,     \
       .features = 0u, .empty_rows = ATTNCHECK_EMPTY_ROW_ERROR,                               \
       .precision = {.accum = ATTNCHECK_F32, .p_cast = ATTNCHECK_F32, .exp_ulps = 4,           \
                     .key_block = 16},                                                        \
       .forward = forward, .ctx = CTX, .struct_size = sizeof(impl_entry),                     \
       .s_cast = ATTNCHECK_BF16, .ftz_formats = ATTNCHECK_FTZ_ACCUM | ATTNCHECK_FTZ_PV_ACCUM, \
       .stages = {.set = ATTNCHECK_STAGE_Q_CAST | ATTNCHECK_STAGE_SCORE_ACCUM |               \
                         ATTNCHECK_STAGE_SOFTMAX_ACCUM | ATTNCHECK_STAGE_PV_ACCUM,            \
                  .q_cast = ATTNCHECK_Q_CAST_KV,                                              \
                  .score_accum = ATTNCHECK_BF16,                                              \
                  .softmax_accum = ATTNCHECK_F32,                                             \
                  .pv_accum = ATTNCHECK_F16},                                                 \
       .n_paths = 2u, .paths = (const attncheck_path*)(const void*)kPaths,                    \
       .last_path = LAST_PATH)

static const impl_entry kImpls[] = {
    TWO_PATHS("two_paths", last_path, &g_two_paths),
    TWO_PATHS("two_paths_bad_index", last_path_out_of_range, &g_bad_index),
    IMPL(.abi_version = ATTNCHECK_ABI_VERSION, .name = "says_no_path",
         .dtypes = 1u << ATTNCHECK_F64, .empty_rows = ATTNCHECK_EMPTY_ROW_ERROR,
         .precision = {.accum = ATTNCHECK_F64, .p_cast = ATTNCHECK_F64}, .forward = forward,
         .ctx = &g_no_path, .struct_size = sizeof(impl_entry), .s_cast = ATTNCHECK_F64,
         .last_path = last_path),
};

const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return (const attncheck_impl*)(const void*)kImpls;
}
