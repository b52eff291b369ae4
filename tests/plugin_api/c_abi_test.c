/* plugin.h and the frozen plugin_v1.h are plain C: this file compiles both
 * as C99 with every warning an error (-std=c99 -Wall -Wextra -Werror
 * -pedantic), and pins the ABI: the constants' values of SPEC 5.1 and, on
 * LP64, every struct's layout, so a reordered or retyped field fails the
 * build rather than a plugin. Version 1's offsets are checked on the frozen
 * header, then every version 1 field of plugin.h at the same offset, then
 * the offsets of what version 2 appends. C99 has no _Static_assert: a
 * negative array size is the compile-time check. */
#include "attncheck/plugin.h"
#define ATTNCHECK_PLUGIN_V1_VERSIONED_ONLY
#include "attncheck/plugin_v1.h"

#include <stddef.h>
#include <stdint.h>

#define ABI_ASSERT(name, cond) typedef char abi_assert_##name[(cond) ? 1 : -1]

/* The version is the first field of every versioned struct, so a harness can
   read it before anything whose layout may change. */
ABI_ASSERT(version, ATTNCHECK_ABI_VERSION == 2u && ATTNCHECK_V1_ABI_VERSION == 1u);
ABI_ASSERT(impl_version_first, offsetof(attncheck_impl, abi_version) == 0);
ABI_ASSERT(problem_version_first, offsetof(attncheck_problem, abi_version) == 0);
ABI_ASSERT(v1_impl_version_first, offsetof(attncheck_v1_impl, abi_version) == 0);
ABI_ASSERT(v1_problem_version_first, offsetof(attncheck_v1_problem, abi_version) == 0);

ABI_ASSERT(dtypes, ATTNCHECK_F64 == 0u && ATTNCHECK_F32 == 1u && ATTNCHECK_BF16 == 2u &&
                       ATTNCHECK_F16 == 3u && ATTNCHECK_E4M3 == 4u && ATTNCHECK_E5M2 == 5u);
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
ABI_ASSERT(features_v2, ATTNCHECK_FEATURE_SINK == 32768u && ATTNCHECK_FEATURE_PACKED == 65536u &&
                            ATTNCHECK_FEATURE_PAGED_KV == 131072u &&
                            ATTNCHECK_FEATURE_DESCALE == 262144u);
ABI_ASSERT(ftz, ATTNCHECK_FTZ_ACCUM == 1u && ATTNCHECK_FTZ_P_CAST == 2u && ATTNCHECK_FTZ_OUT == 4u);
/* Appended to version 2: precision by stage and by path (SPEC 4.1). */
ABI_ASSERT(ftz_pv_accum, ATTNCHECK_FTZ_PV_ACCUM == 8u);
ABI_ASSERT(stages, ATTNCHECK_STAGE_Q_CAST == 1u && ATTNCHECK_STAGE_SCORE_ACCUM == 2u &&
                       ATTNCHECK_STAGE_SOFTMAX_ACCUM == 4u && ATTNCHECK_STAGE_PV_ACCUM == 8u);
ABI_ASSERT(q_cast_kv, ATTNCHECK_Q_CAST_KV == 8u);
/* The appended fields start where the first version 2 layout ended, on
   every platform: a plugin built against that header has a struct_size of
   offsetof(attncheck_impl, stages). */
ABI_ASSERT(impl_appended_after_combos,
           offsetof(attncheck_impl, stages) ==
               offsetof(attncheck_impl, combos) + sizeof(const attncheck_dtype_combo*));
ABI_ASSERT(path_size_first, offsetof(attncheck_path, struct_size) == 0);

#if UINTPTR_MAX == 0xffffffffffffffffu
/* ---- version 1, on the frozen header ---- */
/* attncheck_problem: two uint32_t, seven int64_t, then pointer + strides. */
ABI_ASSERT(v1_problem_dtype, offsetof(attncheck_v1_problem, dtype) == 4);
ABI_ASSERT(v1_problem_batch, offsetof(attncheck_v1_problem, batch) == 8);
ABI_ASSERT(v1_problem_heads, offsetof(attncheck_v1_problem, heads) == 16);
ABI_ASSERT(v1_problem_kv_heads, offsetof(attncheck_v1_problem, kv_heads) == 24);
ABI_ASSERT(v1_problem_tq, offsetof(attncheck_v1_problem, tq) == 32);
ABI_ASSERT(v1_problem_tk, offsetof(attncheck_v1_problem, tk) == 40);
ABI_ASSERT(v1_problem_dk, offsetof(attncheck_v1_problem, dk) == 48);
ABI_ASSERT(v1_problem_dv, offsetof(attncheck_v1_problem, dv) == 56);
ABI_ASSERT(v1_problem_q, offsetof(attncheck_v1_problem, q) == 64);
ABI_ASSERT(v1_problem_q_strides, offsetof(attncheck_v1_problem, q_strides) == 72);
ABI_ASSERT(v1_problem_k, offsetof(attncheck_v1_problem, k) == 104);
ABI_ASSERT(v1_problem_k_strides, offsetof(attncheck_v1_problem, k_strides) == 112);
ABI_ASSERT(v1_problem_v, offsetof(attncheck_v1_problem, v) == 144);
ABI_ASSERT(v1_problem_v_strides, offsetof(attncheck_v1_problem, v_strides) == 152);
ABI_ASSERT(v1_problem_key_valid, offsetof(attncheck_v1_problem, key_valid) == 184);
ABI_ASSERT(v1_problem_mask, offsetof(attncheck_v1_problem, mask) == 192);
ABI_ASSERT(v1_problem_mask_strides, offsetof(attncheck_v1_problem, mask_strides) == 200);
ABI_ASSERT(v1_problem_bias, offsetof(attncheck_v1_problem, bias) == 232);
ABI_ASSERT(v1_problem_bias_strides, offsetof(attncheck_v1_problem, bias_strides) == 240);
ABI_ASSERT(v1_problem_causal, offsetof(attncheck_v1_problem, causal) == 272);
ABI_ASSERT(v1_problem_align, offsetof(attncheck_v1_problem, align) == 276);
ABI_ASSERT(v1_problem_window_left, offsetof(attncheck_v1_problem, window_left) == 280);
ABI_ASSERT(v1_problem_window_right, offsetof(attncheck_v1_problem, window_right) == 288);
ABI_ASSERT(v1_problem_scale, offsetof(attncheck_v1_problem, scale) == 296);
ABI_ASSERT(v1_problem_softcap, offsetof(attncheck_v1_problem, softcap) == 304);
ABI_ASSERT(v1_problem_size, sizeof(attncheck_v1_problem) == 312);

ABI_ASSERT(v1_outputs_out, offsetof(attncheck_v1_outputs, out) == 0);
ABI_ASSERT(v1_outputs_strides, offsetof(attncheck_v1_outputs, out_strides) == 8);
ABI_ASSERT(v1_outputs_weights, offsetof(attncheck_v1_outputs, weights) == 40);
ABI_ASSERT(v1_outputs_lse, offsetof(attncheck_v1_outputs, lse) == 48);
ABI_ASSERT(v1_outputs_error, offsetof(attncheck_v1_outputs, error) == 56);
ABI_ASSERT(v1_outputs_error_size, sizeof(((attncheck_v1_outputs*)0)->error) == 256);
ABI_ASSERT(v1_outputs_size, sizeof(attncheck_v1_outputs) == 312);

ABI_ASSERT(v1_grads_dout, offsetof(attncheck_v1_grads, dout) == 0);
ABI_ASSERT(v1_grads_dout_strides, offsetof(attncheck_v1_grads, dout_strides) == 8);
ABI_ASSERT(v1_grads_dq, offsetof(attncheck_v1_grads, dq) == 40);
ABI_ASSERT(v1_grads_dk, offsetof(attncheck_v1_grads, dk) == 48);
ABI_ASSERT(v1_grads_dv, offsetof(attncheck_v1_grads, dv) == 56);
ABI_ASSERT(v1_grads_size, sizeof(attncheck_v1_grads) == 64);

ABI_ASSERT(v1_precision_accum, offsetof(attncheck_v1_precision, accum) == 0);
ABI_ASSERT(v1_precision_p_cast, offsetof(attncheck_v1_precision, p_cast) == 4);
ABI_ASSERT(v1_precision_exp_ulps, offsetof(attncheck_v1_precision, exp_ulps) == 8);
ABI_ASSERT(v1_precision_ftz, offsetof(attncheck_v1_precision, flush_to_zero) == 12);
ABI_ASSERT(v1_precision_key_block, offsetof(attncheck_v1_precision, key_block) == 16);
ABI_ASSERT(v1_precision_size, sizeof(attncheck_v1_precision) == 24);
ABI_ASSERT(v1_limits_max_tq, offsetof(attncheck_v1_limits, max_tq) == 0);
ABI_ASSERT(v1_limits_max_tk, offsetof(attncheck_v1_limits, max_tk) == 8);
ABI_ASSERT(v1_limits_max_bh, offsetof(attncheck_v1_limits, max_batch_heads) == 16);
ABI_ASSERT(v1_limits_dk_min, offsetof(attncheck_v1_limits, dk_min) == 24);
ABI_ASSERT(v1_limits_dk_max, offsetof(attncheck_v1_limits, dk_max) == 32);
ABI_ASSERT(v1_limits_dk_multiple, offsetof(attncheck_v1_limits, dk_multiple) == 40);
ABI_ASSERT(v1_limits_dv_equals_dk, offsetof(attncheck_v1_limits, dv_equals_dk) == 48);
ABI_ASSERT(v1_limits_size, sizeof(attncheck_v1_limits) == 56);

ABI_ASSERT(v1_impl_name, offsetof(attncheck_v1_impl, name) == 8);
ABI_ASSERT(v1_impl_dtypes, offsetof(attncheck_v1_impl, dtypes) == 16);
ABI_ASSERT(v1_impl_features, offsetof(attncheck_v1_impl, features) == 20);
ABI_ASSERT(v1_impl_empty_rows, offsetof(attncheck_v1_impl, empty_rows) == 24);
ABI_ASSERT(v1_impl_precision, offsetof(attncheck_v1_impl, precision) == 32);
ABI_ASSERT(v1_impl_limits, offsetof(attncheck_v1_impl, limits) == 56);
ABI_ASSERT(v1_impl_forward, offsetof(attncheck_v1_impl, forward) == 112);
ABI_ASSERT(v1_impl_backward, offsetof(attncheck_v1_impl, backward) == 120);
ABI_ASSERT(v1_impl_ctx, offsetof(attncheck_v1_impl, ctx) == 128);
ABI_ASSERT(v1_impl_size, sizeof(attncheck_v1_impl) == 136);
#endif

/* ---- version 2: every version 1 field where the frozen header has it ---- */
#define SAME_OFFSET(type, field) \
  ABI_ASSERT(type##_##field##_kept, \
             offsetof(attncheck_##type, field) == offsetof(attncheck_v1_##type, field))
SAME_OFFSET(problem, abi_version);
SAME_OFFSET(problem, dtype);
SAME_OFFSET(problem, batch);
SAME_OFFSET(problem, heads);
SAME_OFFSET(problem, kv_heads);
SAME_OFFSET(problem, tq);
SAME_OFFSET(problem, tk);
SAME_OFFSET(problem, dk);
SAME_OFFSET(problem, dv);
SAME_OFFSET(problem, q);
SAME_OFFSET(problem, q_strides);
SAME_OFFSET(problem, k);
SAME_OFFSET(problem, k_strides);
SAME_OFFSET(problem, v);
SAME_OFFSET(problem, v_strides);
SAME_OFFSET(problem, key_valid);
SAME_OFFSET(problem, mask);
SAME_OFFSET(problem, mask_strides);
SAME_OFFSET(problem, bias);
SAME_OFFSET(problem, bias_strides);
SAME_OFFSET(problem, causal);
SAME_OFFSET(problem, align);
SAME_OFFSET(problem, window_left);
SAME_OFFSET(problem, window_right);
SAME_OFFSET(problem, scale);
SAME_OFFSET(problem, softcap);
SAME_OFFSET(outputs, out);
SAME_OFFSET(outputs, out_strides);
SAME_OFFSET(outputs, weights);
SAME_OFFSET(outputs, lse);
SAME_OFFSET(outputs, error);
SAME_OFFSET(grads, dout);
SAME_OFFSET(grads, dout_strides);
SAME_OFFSET(grads, dq);
SAME_OFFSET(grads, dk);
SAME_OFFSET(grads, dv);
SAME_OFFSET(precision, accum);
SAME_OFFSET(precision, p_cast);
SAME_OFFSET(precision, exp_ulps);
SAME_OFFSET(precision, flush_to_zero);
SAME_OFFSET(precision, key_block);
SAME_OFFSET(limits, max_tq);
SAME_OFFSET(limits, max_tk);
SAME_OFFSET(limits, max_batch_heads);
SAME_OFFSET(limits, dk_min);
SAME_OFFSET(limits, dk_max);
SAME_OFFSET(limits, dk_multiple);
SAME_OFFSET(limits, dv_equals_dk);
SAME_OFFSET(impl, abi_version);
SAME_OFFSET(impl, name);
SAME_OFFSET(impl, dtypes);
SAME_OFFSET(impl, features);
SAME_OFFSET(impl, empty_rows);
SAME_OFFSET(impl, precision);
SAME_OFFSET(impl, limits);
SAME_OFFSET(impl, forward);
SAME_OFFSET(impl, backward);
SAME_OFFSET(impl, ctx);
/* Structs that did not grow keep their size; the others grow at the end. */
ABI_ASSERT(outputs_same_size, sizeof(attncheck_outputs) == sizeof(attncheck_v1_outputs));
ABI_ASSERT(precision_frozen, sizeof(attncheck_precision) == sizeof(attncheck_v1_precision));
ABI_ASSERT(limits_same_size, sizeof(attncheck_limits) == sizeof(attncheck_v1_limits));
ABI_ASSERT(problem_grows_at_end, offsetof(attncheck_problem, q_dtype) == sizeof(attncheck_v1_problem));
ABI_ASSERT(grads_grow_at_end, offsetof(attncheck_grads, dsink) == sizeof(attncheck_v1_grads));
ABI_ASSERT(impl_grows_at_end, offsetof(attncheck_impl, struct_size) == sizeof(attncheck_v1_impl));

#if UINTPTR_MAX == 0xffffffffffffffffu
/* ---- what version 2 appends ---- */
ABI_ASSERT(problem_q_dtype, offsetof(attncheck_problem, q_dtype) == 312);
ABI_ASSERT(problem_kv_dtype, offsetof(attncheck_problem, kv_dtype) == 316);
ABI_ASSERT(problem_q_descale, offsetof(attncheck_problem, q_descale) == 320);
ABI_ASSERT(problem_k_descale, offsetof(attncheck_problem, k_descale) == 328);
ABI_ASSERT(problem_v_descale, offsetof(attncheck_problem, v_descale) == 336);
ABI_ASSERT(problem_sink, offsetof(attncheck_problem, sink) == 344);
ABI_ASSERT(problem_cu_seqlens_q, offsetof(attncheck_problem, cu_seqlens_q) == 352);
ABI_ASSERT(problem_cu_seqlens_k, offsetof(attncheck_problem, cu_seqlens_k) == 360);
ABI_ASSERT(problem_seqlens_k, offsetof(attncheck_problem, seqlens_k) == 368);
ABI_ASSERT(problem_block_table, offsetof(attncheck_problem, block_table) == 376);
ABI_ASSERT(problem_block_table_stride, offsetof(attncheck_problem, block_table_stride) == 384);
ABI_ASSERT(problem_page_size, offsetof(attncheck_problem, page_size) == 392);
ABI_ASSERT(problem_num_pages, offsetof(attncheck_problem, num_pages) == 400);
ABI_ASSERT(problem_size, sizeof(attncheck_problem) == 408);

ABI_ASSERT(grads_dsink, offsetof(attncheck_grads, dsink) == 64);
ABI_ASSERT(grads_size, sizeof(attncheck_grads) == 72);

ABI_ASSERT(combo_q, offsetof(attncheck_dtype_combo, q_dtype) == 0);
ABI_ASSERT(combo_kv, offsetof(attncheck_dtype_combo, kv_dtype) == 4);
ABI_ASSERT(combo_out, offsetof(attncheck_dtype_combo, out_dtype) == 8);
ABI_ASSERT(combo_size, sizeof(attncheck_dtype_combo) == 12);

ABI_ASSERT(impl_struct_size, offsetof(attncheck_impl, struct_size) == 136);
ABI_ASSERT(impl_s_cast, offsetof(attncheck_impl, s_cast) == 140);
ABI_ASSERT(impl_ftz_formats, offsetof(attncheck_impl, ftz_formats) == 144);
ABI_ASSERT(impl_n_combos, offsetof(attncheck_impl, n_combos) == 148);
ABI_ASSERT(impl_combos, offsetof(attncheck_impl, combos) == 152);
/* Appended to version 2 (precision by stage and by path): the first
   version 2 layout ended at 160, where the stages begin. */
ABI_ASSERT(impl_stages, offsetof(attncheck_impl, stages) == 160);
ABI_ASSERT(impl_n_paths, offsetof(attncheck_impl, n_paths) == 180);
ABI_ASSERT(impl_paths, offsetof(attncheck_impl, paths) == 184);
ABI_ASSERT(impl_last_path, offsetof(attncheck_impl, last_path) == 192);
ABI_ASSERT(impl_size, sizeof(attncheck_impl) == 200);
ABI_ASSERT(stages_set, offsetof(attncheck_stages, set) == 0);
ABI_ASSERT(stages_q_cast, offsetof(attncheck_stages, q_cast) == 4);
ABI_ASSERT(stages_score_accum, offsetof(attncheck_stages, score_accum) == 8);
ABI_ASSERT(stages_softmax_accum, offsetof(attncheck_stages, softmax_accum) == 12);
ABI_ASSERT(stages_pv_accum, offsetof(attncheck_stages, pv_accum) == 16);
ABI_ASSERT(stages_size, sizeof(attncheck_stages) == 20);
ABI_ASSERT(path_struct_size, offsetof(attncheck_path, struct_size) == 0);
ABI_ASSERT(path_name, offsetof(attncheck_path, name) == 8);
ABI_ASSERT(path_precision, offsetof(attncheck_path, precision) == 16);
ABI_ASSERT(path_s_cast, offsetof(attncheck_path, s_cast) == 40);
ABI_ASSERT(path_ftz_formats, offsetof(attncheck_path, ftz_formats) == 44);
ABI_ASSERT(path_stages, offsetof(attncheck_path, stages) == 48);
ABI_ASSERT(path_size, sizeof(attncheck_path) == 72);
#endif

/* The function types a plugin defines must match the descriptor's, in both
   versions. */
static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  o->error[0] = '\0';
  return ATTNCHECK_UNSUPPORTED;
}

static int forward_v1(void* ctx, const attncheck_v1_problem* p, attncheck_v1_outputs* o) {
  (void)ctx;
  (void)p;
  o->error[0] = '\0';
  return ATTNCHECK_UNSUPPORTED;
}

static const attncheck_dtype_combo kCombos[] = {{ATTNCHECK_E4M3, ATTNCHECK_E5M2, ATTNCHECK_BF16}};

/* last_path's type, and a path, as a plugin writes them. */
static int32_t last_path(void* ctx) {
  (void)ctx;
  return -1;
}

static const attncheck_path kPaths[] = {
    {sizeof(attncheck_path), "only", {ATTNCHECK_F64, ATTNCHECK_F64, 0, 0, 0}, ATTNCHECK_F64, 0u,
     {ATTNCHECK_STAGE_Q_CAST, ATTNCHECK_Q_CAST_KV, 0, 0, 0}}};

static const attncheck_impl kImpl = {ATTNCHECK_ABI_VERSION, "c_abi_test", 1u << ATTNCHECK_F64,
                                     0u, ATTNCHECK_EMPTY_ROW_ERROR,
                                     {ATTNCHECK_F64, ATTNCHECK_F64, 0, 0, 0},
                                     {0, 0, 0, 0, 0, 0, 0}, forward, NULL, NULL,
                                     sizeof(attncheck_impl), ATTNCHECK_F64,
                                     ATTNCHECK_FTZ_ACCUM | ATTNCHECK_FTZ_OUT, 1u, kCombos,
                                     {ATTNCHECK_STAGE_Q_CAST, ATTNCHECK_Q_CAST_KV, 0, 0, 0}, 1u,
                                     kPaths, last_path};

static const attncheck_v1_impl kImplV1 = {ATTNCHECK_V1_ABI_VERSION, "c_abi_test_v1",
                                          1u << ATTNCHECK_F64, 0u, ATTNCHECK_EMPTY_ROW_ERROR,
                                          {ATTNCHECK_F64, ATTNCHECK_F64, 0, 0, 0},
                                          {0, 0, 0, 0, 0, 0, 0}, forward_v1, NULL, NULL};

static const attncheck_impl* plugin_impls(size_t* count) {
  *count = 1;
  return &kImpl;
}

static const attncheck_v1_impl* plugin_impls_v1(size_t* count) {
  *count = 1;
  return &kImplV1;
}

int main(void) {
  attncheck_plugin_impls_fn list = plugin_impls;
  attncheck_v1_plugin_impls_fn list_v1 = plugin_impls_v1;
  attncheck_outputs o;
  attncheck_v1_outputs o1;
  size_t count = 0, count_v1 = 0;
  const attncheck_impl* impls = list(&count);
  const attncheck_v1_impl* impls_v1 = list_v1(&count_v1);
  return count == 1 && impls[0].forward(impls[0].ctx, NULL, &o) == ATTNCHECK_UNSUPPORTED &&
                 impls[0].combos[0].out_dtype == ATTNCHECK_BF16 &&
                 impls[0].paths[0].stages.q_cast == ATTNCHECK_Q_CAST_KV &&
                 impls[0].last_path(impls[0].ctx) == -1 && count_v1 == 1 &&
                 impls_v1[0].forward(impls_v1[0].ctx, NULL, &o1) == ATTNCHECK_UNSUPPORTED
             ? 0
             : 1;
}
