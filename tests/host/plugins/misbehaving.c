/* Plugins that break the C ABI's contract while computing a plausible
 * output (uniform attention: the mean of the values): one writes one
 * element past the end of out, one leaves out's last element unwritten,
 * one returns a code the ABI does not know, one writes weights outside
 * their row, one writes into its (read-only) input q, one writes past the
 * end of its input v. The harness must report each as a failure naming
 * the buffer. A version 1 plugin (the frozen header): the guards are the
 * same in both versions. */
#include "attncheck/plugin_v1.h"

enum defect {
  WRITES_PAST_OUT,
  LEAVES_OUT_UNWRITTEN,
  RETURNS_BAD_CODE,
  WRITES_BEFORE_WEIGHTS,
  WRITES_INTO_Q,
  WRITES_PAST_V
};

static int mean_of_values(const attncheck_problem* p, attncheck_outputs* o, int skip_last) {
  const double* v = (const double*)p->v;
  double* out = (double*)o->out;
  int64_t b, h, i, j, d;
  for (b = 0; b < p->batch; ++b)
    for (h = 0; h < p->heads; ++h)
      for (i = 0; i < p->tq; ++i) {
        const int64_t g = h / (p->heads / p->kv_heads);
        const int last = b == p->batch - 1 && h == p->heads - 1 && i == p->tq - 1;
        for (d = 0; d < p->dv; ++d) {
          double acc = 0;
          if (skip_last && last && d == p->dv - 1) continue;
          for (j = 0; j < p->tk; ++j) {
            acc += v[b * p->v_strides[0] + g * p->v_strides[1] + j * p->v_strides[2] +
                     d * p->v_strides[3]];
          }
          out[b * o->out_strides[0] + h * o->out_strides[1] + i * o->out_strides[2] +
              d * o->out_strides[3]] = acc / (double)p->tk;
        }
        if (o->weights) {
          for (j = 0; j < p->tk; ++j) o->weights[((b * p->heads + h) * p->tq + i) * p->tk + j] = 1.0 / (double)p->tk;
        }
      }
  return ATTNCHECK_OK;
}

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const enum defect defect = (enum defect)(*(const int*)ctx);
  const int64_t n = p->batch * p->heads * p->tq * p->dv;
  mean_of_values(p, o, defect == LEAVES_OUT_UNWRITTEN);
  switch (defect) {
    case WRITES_PAST_OUT: ((double*)o->out)[n] = 0; break;
    case RETURNS_BAD_CODE: return 7;
    case WRITES_BEFORE_WEIGHTS: o->weights[-2] = 0.5; break;
    case LEAVES_OUT_UNWRITTEN: break;
    case WRITES_INTO_Q: ((double*)p->q)[0] += 1.0; break;
    case WRITES_PAST_V:
      ((double*)p->v)[p->batch * p->kv_heads * p->tk * p->dv] = 0.0; /* contiguous v */
      break;
  }
  return ATTNCHECK_OK;
}

static const int kDefects[] = {WRITES_PAST_OUT,       LEAVES_OUT_UNWRITTEN, RETURNS_BAD_CODE,
                               WRITES_BEFORE_WEIGHTS, WRITES_INTO_Q,        WRITES_PAST_V};

#define DESCRIPTOR(name, features, defect)                                             \
  {ATTNCHECK_ABI_VERSION, name, 1u << ATTNCHECK_F64, features, ATTNCHECK_EMPTY_ROW_ERROR, \
   {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, forward, 0,            \
   (void*)&kDefects[defect]}

static const attncheck_impl kImpls[] = {
    DESCRIPTOR("writes_past_out", 0u, WRITES_PAST_OUT),
    DESCRIPTOR("leaves_out_unwritten", 0u, LEAVES_OUT_UNWRITTEN),
    DESCRIPTOR("returns_bad_code", 0u, RETURNS_BAD_CODE),
    DESCRIPTOR("writes_before_weights", ATTNCHECK_FEATURE_WEIGHTS, WRITES_BEFORE_WEIGHTS),
    DESCRIPTOR("writes_into_q", 0u, WRITES_INTO_Q),
    DESCRIPTOR("writes_past_v", 0u, WRITES_PAST_V),
};

const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
