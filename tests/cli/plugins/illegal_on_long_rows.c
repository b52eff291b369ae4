/* A kernel with a known death: correct f64 attention that dies of SIGILL
 * on rows of 5 keys or more, as a dispatch that picks an instruction the
 * CPU refuses does (LibTorch-3). Built three times: with SECOND_BUG it also
 * ignores the scale on shorter rows, a second bug the known death must not
 * hide (tests/cli/known_deaths_test.sh); with PLANTED it never dies and
 * ignores the scale only while the environment has PLANTED_BUG, a bug a
 * user plants and then fixes (tests/cli/plugin_walk_test.sh). */

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "attncheck/plugin.h"
#include "rows.h"

enum { kMaxKeys = 4096, kDeadlyKeys = 5 };

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const double* q = (const double*)p->q;
  const double* k = (const double*)p->k;
  const double* v = (const double*)p->v;
  double* out = (double*)o->out;
  double w[kMaxKeys];
  const int64_t group = p->heads / p->kv_heads;
  double scale = p->scale;
  int64_t b, h, i, j, d;
  (void)ctx;
  if (p->tk > kMaxKeys) return ATTNCHECK_UNSUPPORTED;
#ifdef PLANTED
  if (getenv("PLANTED_BUG")) scale = 1;
#else
  if (p->tk >= kDeadlyKeys) raise(SIGILL);
#endif
#ifdef SECOND_BUG
  scale = 1;
#endif
  for (b = 0; b < p->batch; ++b)
    for (h = 0; h < p->heads; ++h)
      for (i = 0; i < p->tq; ++i) {
        const int64_t g = h / group;
        double m = -HUGE_VAL, l = 0;
        for (j = 0; j < p->tk; ++j) {
          double dot = 0;
          w[j] = -HUGE_VAL;
          if (!allowed(p, b, h, i, j)) continue;
          for (d = 0; d < p->dk; ++d) dot += q[at(p->q_strides, b, h, i, d)] * k[at(p->k_strides, b, g, j, d)];
          w[j] = scale * dot;
          if (w[j] > m) m = w[j];
        }
        if (m == -HUGE_VAL) {
          snprintf(o->error, sizeof o->error, "a query has no allowed key");
          return ATTNCHECK_ERROR;
        }
        for (j = 0; j < p->tk; ++j) {
          w[j] = w[j] == -HUGE_VAL ? 0 : exp(w[j] - m);
          l += w[j];
        }
        for (d = 0; d < p->dv; ++d) {
          double acc = 0;
          for (j = 0; j < p->tk; ++j)
            if (w[j] != 0) acc += w[j] * v[at(p->v_strides, b, g, j, d)];
          out[at(o->out_strides, b, h, i, d)] = acc / l;
        }
      }
  return ATTNCHECK_OK;
}

static const attncheck_impl kImpls[] = {{
    .abi_version = ATTNCHECK_ABI_VERSION,
#if defined(SECOND_BUG)
    .name = "illegal_and_unscaled",
#elif defined(PLANTED)
    .name = "planted_scale_bug",
#else
    .name = "illegal_on_long_rows",
#endif
    .dtypes = 1u << ATTNCHECK_F64,
    .features = ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW |
                ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_STRIDES |
                ATTNCHECK_FEATURE_ALIGN_TOP_LEFT | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT |
                ATTNCHECK_FEATURE_SCALE,
    .empty_rows = ATTNCHECK_EMPTY_ROW_ERROR,
    .precision = {.accum = ATTNCHECK_F64, .p_cast = ATTNCHECK_F64, .exp_ulps = 1,
                  .flush_to_zero = 0, .key_block = 0},
    .limits = {0, 0, 0, 0, 0, 0, 0},
    .forward = forward,
    .backward = NULL,
    .ctx = NULL,
    .struct_size = sizeof(attncheck_impl),
    .s_cast = ATTNCHECK_F64,
    .ftz_formats = 0,
    .n_combos = 0,
    .combos = NULL,
}};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
