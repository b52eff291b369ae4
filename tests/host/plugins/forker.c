/* A plugin whose forward forks once per call when tk >= 3, and both
 * processes return from forward: the copy must never act as the harness
 * (its worker leaves at once) and the call must fail with "forked". Each
 * call forks at most once, and the copy returns straight away, so a run
 * makes a bounded number of processes (one per failing call). Built as a
 * test plugin only (tests/host/isolation.cmake). */
#define _POSIX_C_SOURCE 200809L
#define attncheck_plugin_impls example_plugin_impls
#include "../../../examples/plugin/attention.c"
#undef attncheck_plugin_impls

#include <unistd.h>

static int forks(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) (void)fork();
  return forward_f64(ctx, p, o);
}

/* The example's features but STRIDES, so out is contiguous. */
#define FORKER_FEATURES (EXAMPLE_FEATURES & ~(uint32_t)ATTNCHECK_FEATURE_STRIDES)

static const attncheck_impl kForker[] = {
    {ATTNCHECK_ABI_VERSION, "forks_on_three_keys", 1u << ATTNCHECK_F64, FORKER_FEATURES,
     ATTNCHECK_EMPTY_ROW_ZERO, {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0},
     forks, NULL, NULL, sizeof(attncheck_impl), ATTNCHECK_F64, 0u, 0u, NULL, {0, 0, 0, 0, 0}, 0u, NULL, NULL},
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kForker / sizeof kForker[0];
  return kForker;
}
