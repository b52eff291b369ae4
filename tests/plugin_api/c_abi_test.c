/* plugin.h is plain C: this file compiles it as C99 with every warning an
 * error (-std=c99 -Wall -Wextra -Werror -pedantic), and pins the ABI: the
 * constants' values of SPEC 5.1 and, on LP64, every struct's layout, so a
 * reordered or retyped field fails the build rather than a plugin. C99 has
 * no _Static_assert: a negative array size is the compile-time check. */
#include "attncheck/plugin.h"

#include <stddef.h>
#include <stdint.h>

#define ABI_ASSERT(name, cond) typedef char abi_assert_##name[(cond) ? 1 : -1]

/* The version is the first field of every versioned struct, so a harness can
   read it before anything whose layout may change. */
ABI_ASSERT(version, ATTNCHECK_ABI_VERSION == 1u);
ABI_ASSERT(impl_version_first, offsetof(attncheck_impl, abi_version) == 0);
ABI_ASSERT(problem_version_first, offsetof(attncheck_problem, abi_version) == 0);

ABI_ASSERT(dtypes, ATTNCHECK_F64 == 0u && ATTNCHECK_F32 == 1u && ATTNCHECK_BF16 == 2u &&
                       ATTNCHECK_F16 == 3u);
ABI_ASSERT(align, ATTNCHECK_ALIGN_TOP_LEFT == 0u && ATTNCHECK_ALIGN_BOTTOM_RIGHT == 1u);
ABI_ASSERT(empty_rows, ATTNCHECK_EMPTY_ROW_ERROR == 0u && ATTNCHECK_EMPTY_ROW_ZERO == 1u);
ABI_ASSERT(codes, ATTNCHECK_OK == 0 && ATTNCHECK_ERROR == 1 && ATTNCHECK_UNSUPPORTED == 2);
ABI_ASSERT(features_low, ATTNCHECK_FEATURE_KEY_VALID == 1u && ATTNCHECK_FEATURE_CAUSAL == 2u &&
                             ATTNCHECK_FEATURE_WINDOW == 4u && ATTNCHECK_FEATURE_MASK == 8u &&
                             ATTNCHECK_FEATURE_BIAS == 16u && ATTNCHECK_FEATURE_GQA == 32u &&
                             ATTNCHECK_FEATURE_STRIDES == 64u &&
                             ATTNCHECK_FEATURE_WEIGHTS == 128u);
ABI_ASSERT(features_high, ATTNCHECK_FEATURE_LSE == 256u && ATTNCHECK_FEATURE_BACKWARD == 512u &&
                              ATTNCHECK_FEATURE_SOFTCAP == 1024u &&
                              ATTNCHECK_FEATURE_ALIGN_TOP_LEFT == 2048u &&
                              ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT == 4096u &&
                              ATTNCHECK_FEATURE_SCALE == 8192u &&
                              ATTNCHECK_FEATURE_NONDETERMINISTIC == 16384u);

#if UINTPTR_MAX == 0xffffffffffffffffu
/* attncheck_problem: two uint32_t, seven int64_t, then pointer + strides. */
ABI_ASSERT(problem_dtype, offsetof(attncheck_problem, dtype) == 4);
ABI_ASSERT(problem_batch, offsetof(attncheck_problem, batch) == 8);
ABI_ASSERT(problem_dv, offsetof(attncheck_problem, dv) == 56);
ABI_ASSERT(problem_q, offsetof(attncheck_problem, q) == 64);
ABI_ASSERT(problem_q_strides, offsetof(attncheck_problem, q_strides) == 72);
ABI_ASSERT(problem_k, offsetof(attncheck_problem, k) == 104);
ABI_ASSERT(problem_v, offsetof(attncheck_problem, v) == 144);
ABI_ASSERT(problem_key_valid, offsetof(attncheck_problem, key_valid) == 184);
ABI_ASSERT(problem_mask, offsetof(attncheck_problem, mask) == 192);
ABI_ASSERT(problem_bias, offsetof(attncheck_problem, bias) == 232);
ABI_ASSERT(problem_causal, offsetof(attncheck_problem, causal) == 272);
ABI_ASSERT(problem_align, offsetof(attncheck_problem, align) == 276);
ABI_ASSERT(problem_window, offsetof(attncheck_problem, window_left) == 280);
ABI_ASSERT(problem_scale, offsetof(attncheck_problem, scale) == 296);
ABI_ASSERT(problem_softcap, offsetof(attncheck_problem, softcap) == 304);
ABI_ASSERT(problem_size, sizeof(attncheck_problem) == 312);

ABI_ASSERT(outputs_strides, offsetof(attncheck_outputs, out_strides) == 8);
ABI_ASSERT(outputs_weights, offsetof(attncheck_outputs, weights) == 40);
ABI_ASSERT(outputs_lse, offsetof(attncheck_outputs, lse) == 48);
ABI_ASSERT(outputs_error, offsetof(attncheck_outputs, error) == 56);
ABI_ASSERT(outputs_error_size, sizeof(((attncheck_outputs*)0)->error) == 256);

ABI_ASSERT(grads_dq, offsetof(attncheck_grads, dq) == 40);
ABI_ASSERT(grads_dv, offsetof(attncheck_grads, dv) == 56);

ABI_ASSERT(precision_key_block, offsetof(attncheck_precision, key_block) == 16);
ABI_ASSERT(precision_size, sizeof(attncheck_precision) == 24);
ABI_ASSERT(limits_dv_equals_dk, offsetof(attncheck_limits, dv_equals_dk) == 48);
ABI_ASSERT(limits_size, sizeof(attncheck_limits) == 56);

ABI_ASSERT(impl_name, offsetof(attncheck_impl, name) == 8);
ABI_ASSERT(impl_dtypes, offsetof(attncheck_impl, dtypes) == 16);
ABI_ASSERT(impl_features, offsetof(attncheck_impl, features) == 20);
ABI_ASSERT(impl_empty_rows, offsetof(attncheck_impl, empty_rows) == 24);
ABI_ASSERT(impl_precision, offsetof(attncheck_impl, precision) == 32);
ABI_ASSERT(impl_limits, offsetof(attncheck_impl, limits) == 56);
ABI_ASSERT(impl_forward, offsetof(attncheck_impl, forward) == 112);
ABI_ASSERT(impl_backward, offsetof(attncheck_impl, backward) == 120);
ABI_ASSERT(impl_ctx, offsetof(attncheck_impl, ctx) == 128);
ABI_ASSERT(impl_size, sizeof(attncheck_impl) == 136);
#endif

/* The function types a plugin defines must match the descriptor's. */
static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  o->error[0] = '\0';
  return ATTNCHECK_UNSUPPORTED;
}

static const attncheck_impl kImpl = {ATTNCHECK_ABI_VERSION, "c_abi_test", 1u << ATTNCHECK_F64,
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
