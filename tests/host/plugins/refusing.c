/* Plugins that are correct attention (the example plugin's f64 kernel) and
 * declare the example's features, but answer ATTNCHECK_UNSUPPORTED where a
 * kernel that lacks one of them would:
 *   refuses_bottom_right   bottom-right alignment where it differs from
 *                          top-left (a causal mask or a window, tq != tk)
 *   refuses_causal         every causal problem
 *   refuses_everything     every problem (its declaration is not the
 *                          question: a property of it is unsupported)
 * The harness must fail the properties whose cases exercise the first two
 * features (docs/properties.md, the refusal rule), never pass them.
 * Built as a test plugin only (tests/host/isolation.cmake). */
#define attncheck_plugin_impls example_plugin_impls
#include "../../../examples/plugin/attention.c"
#undef attncheck_plugin_impls

static int refuses_bottom_right(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const int structural = p->causal || p->window_left >= 0 || p->window_right >= 0;
  if (structural && p->align == ATTNCHECK_ALIGN_BOTTOM_RIGHT && p->tq != p->tk) {
    return ATTNCHECK_UNSUPPORTED;
  }
  return forward_f64(ctx, p, o);
}

static int refuses_causal(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->causal) return ATTNCHECK_UNSUPPORTED;
  return forward_f64(ctx, p, o);
}

static int refuses_everything(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  (void)o;
  return ATTNCHECK_UNSUPPORTED;
}

#define REFUSING(name, fn)                                                                    \
  {ATTNCHECK_ABI_VERSION, name, 1u << ATTNCHECK_F64, EXAMPLE_FEATURES, ATTNCHECK_EMPTY_ROW_ZERO, \
   {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, fn, NULL, NULL,                \
   sizeof(attncheck_impl), ATTNCHECK_F64, 0u, 0u, NULL, {0, 0, 0, 0, 0}, 0u, NULL, NULL}

static const attncheck_impl kRefusing[] = {
    REFUSING("refuses_bottom_right", refuses_bottom_right),
    REFUSING("refuses_causal", refuses_causal),
    REFUSING("refuses_everything", refuses_everything),
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kRefusing / sizeof kRefusing[0];
  return kRefusing;
}
