/* A broken f64 implementation that a plain run cannot catch and --strict
 * does: masked keys get weight 0, but P.V still multiplies their (zero)
 * weights by their values, so a NaN value at a masked key (--strict's) leaks
 * into the output, while a huge finite one (the default's) gives 0. */

#include <math.h>
#include <stdio.h>

#include "attncheck/plugin.h"
#include "rows.h"

enum { kMaxKeys = 4096 };

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const double* q = (const double*)p->q;
  const double* k = (const double*)p->k;
  const double* v = (const double*)p->v;
  double* out = (double*)o->out;
  double w[kMaxKeys];
  const int64_t group = p->heads / p->kv_heads;
  int64_t b, h, i, j, d;
  (void)ctx;
  if (p->tk > kMaxKeys) return ATTNCHECK_UNSUPPORTED;
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
          w[j] = p->scale * dot;
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
          /* The bug: every key, masked or not. */
          for (j = 0; j < p->tk; ++j) acc += w[j] / l * v[at(p->v_strides, b, g, j, d)];
          out[at(o->out_strides, b, h, i, d)] = acc;
        }
      }
  return ATTNCHECK_OK;
}

static const attncheck_impl kImpls[] = {{
    .abi_version = ATTNCHECK_ABI_VERSION,
    .name = "masked_times_v",
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
