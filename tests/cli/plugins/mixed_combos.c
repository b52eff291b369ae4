/* An implementation declaring a combination of formats besides its uniform
 * one (bf16 queries, e4m3 keys and values, bf16 output), for `list` and
 * `check --dtype COMBO` (SPEC 5.2). It computes nothing: every call is
 * unsupported, so a run that reached it would say so. */

#include "attncheck/plugin.h"

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  (void)o;
  return ATTNCHECK_UNSUPPORTED;
}

static const attncheck_dtype_combo kCombos[] = {
    {ATTNCHECK_BF16, ATTNCHECK_BF16, ATTNCHECK_BF16},
    {ATTNCHECK_BF16, ATTNCHECK_E4M3, ATTNCHECK_BF16},
};

static const attncheck_impl kImpls[] = {{
    .abi_version = ATTNCHECK_ABI_VERSION,
    .name = "mixed_combos",
    .dtypes = 1u << ATTNCHECK_BF16,
    .features = ATTNCHECK_FEATURE_DESCALE,
    .empty_rows = ATTNCHECK_EMPTY_ROW_ERROR,
    .precision = {.accum = ATTNCHECK_F32, .p_cast = ATTNCHECK_BF16, .exp_ulps = 1,
                  .flush_to_zero = 0, .key_block = 0},
    .limits = {0, 0, 0, 0, 0, 0, 0},
    .forward = forward,
    .backward = 0,
    .ctx = 0,
    .struct_size = sizeof(attncheck_impl),
    .s_cast = ATTNCHECK_F32,
    .ftz_formats = 0,
    .n_combos = 2,
    .combos = kCombos,
}};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
