/* A plugin whose descriptors have the defect the build selects, for the
 * loader's exit-2 paths. Version 1 descriptors (the frozen plugin_v1.h):
 * -DBAD_NULL_NAME, -DBAD_NO_DTYPE, -DBAD_FEATURE (bit 15, unknown to
 * version 1), -DBAD_BUILTIN_NAME (the name of a built-in implementation).
 * Version 2 descriptors (plugin.h): -DBAD_ABI (abi_version 3, unknown),
 * -DBAD_MIXED (descriptor 1 says version 1), -DBAD_STRUCT_SIZE (the
 * version 1 size), -DBAD_COMBO (a combination naming dtype 9). */
#if defined(BAD_ABI) || defined(BAD_MIXED) || defined(BAD_STRUCT_SIZE) || defined(BAD_COMBO)
#define VERSION_2
#include "attncheck/plugin.h"
#else
#include "attncheck/plugin_v1.h"
#endif

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  (void)o;
  return ATTNCHECK_UNSUPPORTED;
}

#if defined(BAD_ABI)
#define ABI 3u
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

#ifdef VERSION_2
#if defined(BAD_STRUCT_SIZE)
#define STRUCT_SIZE 136u
#else
#define STRUCT_SIZE ((uint32_t)sizeof(attncheck_impl))
#endif
#if defined(BAD_COMBO)
static const attncheck_dtype_combo kCombos[] = {{ATTNCHECK_F64, ATTNCHECK_F64, ATTNCHECK_F64},
                                                {9u, ATTNCHECK_F64, ATTNCHECK_F64}};
#define COMBOS 2u, kCombos
#else
#define COMBOS 0u, 0
#endif
#define DESCRIPTOR(abi, name)                                                                \
  {abi, name, DTYPES, FEATURES, ATTNCHECK_EMPTY_ROW_ERROR, {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, \
   {0, 0, 0, 0, 0, 0, 0}, forward, 0, 0, STRUCT_SIZE, ATTNCHECK_F64, 0u, COMBOS, {0, 0, 0, 0, 0}, 0, 0, 0}
#else
#define DESCRIPTOR(abi, name)                                                                \
  {abi, name, DTYPES, FEATURES, ATTNCHECK_EMPTY_ROW_ERROR, {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, \
   {0, 0, 0, 0, 0, 0, 0}, forward, 0, 0}
#endif

static const attncheck_impl kImpls[] = {
    DESCRIPTOR(ABI, NAME),
#if defined(BAD_MIXED)
    DESCRIPTOR(1u, "bad_descriptor_v1"),
#endif
};

const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
