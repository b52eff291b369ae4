/* The frozen plugin_v1.h included alone is the version 1 header, names and
 * all: a version 1 plugin's source compiles against it unchanged (C99,
 * warnings as errors), with version 1's constant and layout. */
#include "attncheck/plugin_v1.h"

#include <stddef.h>
#include <stdint.h>

#define ABI_ASSERT(name, cond) typedef char abi_assert_##name[(cond) ? 1 : -1]

ABI_ASSERT(version, ATTNCHECK_ABI_VERSION == 1u);
#if UINTPTR_MAX == 0xffffffffffffffffu
ABI_ASSERT(problem_size, sizeof(struct attncheck_problem) == 312);
ABI_ASSERT(impl_ctx, offsetof(attncheck_impl, ctx) == 128);
ABI_ASSERT(impl_size, sizeof(attncheck_impl) == 136);
#endif

static int forward(void* ctx, const struct attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  o->error[0] = '\0';
  return ATTNCHECK_UNSUPPORTED;
}

static const attncheck_impl kImpl = {ATTNCHECK_ABI_VERSION, "c_abi_v1_test", 1u << ATTNCHECK_F64,
                                     0u, ATTNCHECK_EMPTY_ROW_ERROR,
                                     {ATTNCHECK_F64, ATTNCHECK_F64, 0, 0, 0},
                                     {0, 0, 0, 0, 0, 0, 0}, forward, NULL, NULL};

static const attncheck_impl* plugin_impls(size_t* count) {
  *count = 1;
  return &kImpl;
}

int main(void) {
  attncheck_plugin_impls_fn list = plugin_impls;
  attncheck_outputs o;
  size_t count = 0;
  const attncheck_impl* impls = list(&count);
  return count == 1 && impls[0].forward(impls[0].ctx, NULL, &o) == ATTNCHECK_UNSUPPORTED ? 0 : 1;
}
