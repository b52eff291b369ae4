/* A plugin whose one descriptor has the defect the build selects, for the
 * loader's exit-2 paths: -DBAD_ABI (abi_version 2), -DBAD_NULL_NAME,
 * -DBAD_NO_DTYPE, -DBAD_FEATURE (bit 15, unknown), -DBAD_BUILTIN_NAME (the
 * name of a built-in implementation). */
#include "attncheck/plugin.h"

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  (void)o;
  return ATTNCHECK_UNSUPPORTED;
}

#if defined(BAD_ABI)
#define ABI 2u
#else
#define ABI ATTNCHECK_ABI_VERSION
#endif
#if defined(BAD_NULL_NAME)
#define NAME 0
#elif defined(BAD_BUILTIN_NAME)
#define NAME "loop_f64"
#else
#define NAME "bad_descriptor"
#endif
#if defined(BAD_NO_DTYPE)
#define DTYPES 0u
#else
#define DTYPES (1u << ATTNCHECK_F64)
#endif
#if defined(BAD_FEATURE)
#define FEATURES (ATTNCHECK_FEATURE_CAUSAL | (1u << 15))
#else
#define FEATURES ATTNCHECK_FEATURE_CAUSAL
#endif

static const attncheck_impl kImpls[] = {
    {ABI, NAME, DTYPES, FEATURES, ATTNCHECK_EMPTY_ROW_ERROR,
     {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, forward, 0, 0},
};

const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = 1;
  return kImpls;
}
