/* Plugins that are correct attention (the example plugin's f64 kernel)
 * except on some inputs, where they do what a broken kernel does to the
 * process running it. The harness must report each as a failed property
 * with a shrunk counterexample and a fixture, and go on checking:
 *   crashes_on_three_keys   a segmentation fault when tk >= 3
 *   aborts_on_wide_heads    abort() when dk >= 4
 *   spins_on_two_queries    a busy loop that never ends when tq >= 2
 *   blocks_on_two_queries   a sleep that never ends when tq >= 2
 *   spins_on_three_keys     a busy loop that never ends when tk == 3, and
 *                           only then: a kernel that hangs on one shape
 *   scribbles_past_out      writes 8 elements past the end of out when
 *                           tk >= 3, then returns normally
 * A version 2 plugin, like the example. Built as a test plugin only
 * (tests/host/isolation.cmake). */
#define _POSIX_C_SOURCE 200809L
#define attncheck_plugin_impls example_plugin_impls
#include "../../../examples/plugin/attention.c"
#undef attncheck_plugin_impls

#include <time.h>

static int crashes(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    volatile int* nowhere = NULL;
    *nowhere = 1;
  }
  return forward_f64(ctx, p, o);
}

static int aborts(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->dk >= 4) abort();
  return forward_f64(ctx, p, o);
}

static int spins(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  volatile unsigned long n = 0;
  while (p->tq >= 2) ++n;
  return forward_f64(ctx, p, o);
}

static int spins_on_three(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  volatile unsigned long n = 0;
  while (p->tk == 3) ++n;
  return forward_f64(ctx, p, o);
}

static int blocks(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const struct timespec hour = {3600, 0};
  while (p->tq >= 2) nanosleep(&hour, NULL);
  return forward_f64(ctx, p, o);
}

static int scribbles(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const int code = forward_f64(ctx, p, o);
  if (p->tk >= 3) {
    double* out = (double*)o->out;
    const int64_t n = p->batch * p->heads * p->tq * p->dv; /* contiguous: no STRIDES */
    int64_t e;
    for (e = 0; e < 8; ++e) out[n + e] = 0.0;
  }
  return code;
}

/* The example's features but STRIDES, so out is contiguous. */
#define HOSTILE_FEATURES (EXAMPLE_FEATURES & ~(uint32_t)ATTNCHECK_FEATURE_STRIDES)
#define HOSTILE(name, fn)                                                                     \
  {ATTNCHECK_ABI_VERSION, name, 1u << ATTNCHECK_F64, HOSTILE_FEATURES, ATTNCHECK_EMPTY_ROW_ZERO, \
   {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, fn, NULL, NULL,                \
   sizeof(attncheck_impl), ATTNCHECK_F64, 0u, 0u, NULL, {0, 0, 0, 0, 0}, 0u, NULL, NULL}

static const attncheck_impl kHostile[] = {
    HOSTILE("crashes_on_three_keys", crashes), HOSTILE("aborts_on_wide_heads", aborts),
    HOSTILE("spins_on_two_queries", spins),    HOSTILE("blocks_on_two_queries", blocks),
    HOSTILE("scribbles_past_out", scribbles),  HOSTILE("spins_on_three_keys", spins_on_three),
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kHostile / sizeof kHostile[0];
  return kHostile;
}
