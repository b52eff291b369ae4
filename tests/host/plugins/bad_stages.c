/* A plugin whose descriptor "bad_stages" has the defect in its stages or
 * paths (SPEC 4.1, appended to ABI version 2) that the build selects, for
 * the loader's exit-2 paths (tests/host/descriptor_refusals_test.sh).
 * Without a BAD_* definition it is valid: stages, two paths "short" and
 * "tiled", a last_path. One definition per build:
 *
 *   BAD_STAGE_BITS        stages.set has bit 4, unknown
 *   BAD_STAGE_FORMAT      stages.score_accum 9, no dtype
 *   BAD_E5M2_ACCUM        stages.softmax_accum E5M2
 *   BAD_E4M3_ACCUM        stages.pv_accum E4M3
 *   Q8_0_Q_CAST           (valid) stages.q_cast 6 (Q8_0, SPEC 1.2)
 *   BAD_Q4_0_Q_CAST       stages.q_cast 7 (Q4_0: never)
 *   BAD_Q8_0_ACCUM        stages.softmax_accum Q8_0 (a K/V format only)
 *   BAD_Q8_0_P_CAST       precision.p_cast Q8_0
 *   BAD_Q4_0_S_CAST       s_cast Q4_0
 *   BAD_BLOCK_DTYPE_BIT   dtypes has Q8_0's bit
 *   BAD_BLOCK_Q_DTYPE     combos[1].q_dtype Q8_0
 *   BAD_BLOCK_OUT         combos[1].out_dtype Q4_0
 *   BAD_Q_CAST_FORMAT     stages.q_cast 9
 *   BAD_FTZ               ftz_formats bit 4, unknown
 *   BAD_N_PATHS           n_paths 65
 *   BAD_NULL_PATHS        n_paths 2, paths NULL
 *   BAD_PATH_SIZE         paths[0].struct_size 40
 *   BAD_PATH_STRIDE       paths[1].struct_size differs from paths[0]'s
 *   BAD_PATH_NULL_NAME    paths[1].name NULL
 *   BAD_PATH_LONG_NAME    paths[1].name of 300 characters
 *   BAD_PATH_NAME         paths[1].name "Tiled Path"
 *   BAD_PATH_REPEATED     paths[1].name "short" again
 *   BAD_PATH_ACCUM        paths[1].precision.accum 9
 *   BAD_PATH_STAGE        paths[1].stages.pv_accum E5M2
 *   BAD_PATH_FTZ          paths[1].ftz_formats bit 5
 *   BAD_TIGHTER           the descriptor's score_accum f32 is tighter than
 *                         paths[1]'s bf16
 *   LAST_PATH_NO_PATHS    (valid) last_path with n_paths 0 */
#include "attncheck/plugin.h"

#define LONG_NAME                                                                                \
  "a123456789a123456789a123456789a123456789a123456789a123456789a123456789a123456789a123456789" \
  "a123456789a123456789a123456789a123456789a123456789a123456789a123456789a123456789a123456789" \
  "a123456789a123456789a123456789a123456789a123456789a123456789a123456789a123456789a123456789" \
  "a123456789"

#if defined(BAD_PATH_NULL_NAME)
#define PATH1_NAME 0
#elif defined(BAD_PATH_LONG_NAME)
#define PATH1_NAME LONG_NAME
#elif defined(BAD_PATH_NAME)
#define PATH1_NAME "Tiled Path"
#elif defined(BAD_PATH_REPEATED)
#define PATH1_NAME "short"
#else
#define PATH1_NAME "tiled"
#endif

#if defined(BAD_PATH_SIZE)
#define PATH0_SIZE 40u
#else
#define PATH0_SIZE ((uint32_t)sizeof(attncheck_path))
#endif
#if defined(BAD_PATH_STRIDE)
#define PATH1_SIZE ((uint32_t)sizeof(attncheck_path) + 8u)
#else
#define PATH1_SIZE PATH0_SIZE
#endif

#if defined(BAD_PATH_ACCUM)
#define PATH1_ACCUM 9u
#else
#define PATH1_ACCUM ATTNCHECK_F32
#endif
#if defined(BAD_PATH_STAGE)
#define PATH1_PV ATTNCHECK_E5M2
#else
#define PATH1_PV ATTNCHECK_F32
#endif
#if defined(BAD_PATH_FTZ)
#define PATH1_FTZ (1u << 5)
#else
#define PATH1_FTZ 0u
#endif

static const attncheck_path kPaths[] = {
    {.struct_size = PATH0_SIZE, .name = "short",
     .precision = {.accum = ATTNCHECK_F64, .p_cast = ATTNCHECK_F64}, .s_cast = ATTNCHECK_F64},
    {.struct_size = PATH1_SIZE, .name = PATH1_NAME,
     .precision = {.accum = PATH1_ACCUM, .p_cast = ATTNCHECK_F32}, .s_cast = ATTNCHECK_F32,
     .ftz_formats = PATH1_FTZ,
     .stages = {.set = ATTNCHECK_STAGE_SCORE_ACCUM | ATTNCHECK_STAGE_PV_ACCUM,
                .score_accum = ATTNCHECK_BF16, .pv_accum = PATH1_PV}},
};

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  (void)o;
  (void)kPaths; /* not in the descriptor of some builds */
  return ATTNCHECK_UNSUPPORTED;
}

static int32_t last_path(void* ctx) {
  (void)ctx;
  return -1;
}

/* The descriptor's stages: the loosest of its paths' unless a defect says. */
#define Q_CAST_BIT ATTNCHECK_STAGE_Q_CAST
#if defined(Q8_0_Q_CAST)
#define Q_CAST ATTNCHECK_Q8_0
#elif defined(BAD_Q4_0_Q_CAST)
#define Q_CAST 7u
#elif defined(BAD_Q_CAST_FORMAT)
#define Q_CAST 9u
#else
#define Q_CAST ATTNCHECK_F32
#endif
#if defined(BAD_STAGE_BITS)
#define EXTRA_BITS (1u << 4)
#else
#define EXTRA_BITS 0u
#endif
#if defined(BAD_STAGE_FORMAT)
#define SCORE 9u
#elif defined(BAD_TIGHTER)
#define SCORE ATTNCHECK_F32
#else
#define SCORE ATTNCHECK_BF16
#endif
#if defined(BAD_E5M2_ACCUM)
#define SOFTMAX ATTNCHECK_E5M2
#elif defined(BAD_Q8_0_ACCUM)
#define SOFTMAX ATTNCHECK_Q8_0
#else
#define SOFTMAX ATTNCHECK_F32
#endif
#if defined(BAD_E4M3_ACCUM)
#define PV ATTNCHECK_E4M3
#else
#define PV ATTNCHECK_F32
#endif
#if defined(BAD_Q8_0_P_CAST)
#define P_CAST ATTNCHECK_Q8_0
#else
#define P_CAST ATTNCHECK_F32
#endif
#if defined(BAD_Q4_0_S_CAST)
#define S_CAST ATTNCHECK_Q4_0
#else
#define S_CAST ATTNCHECK_F32
#endif
#if defined(BAD_BLOCK_DTYPE_BIT)
#define DTYPES ((1u << ATTNCHECK_F64) | (1u << ATTNCHECK_Q8_0))
#else
#define DTYPES (1u << ATTNCHECK_F64)
#endif
/* Combinations: f64 throughout, and f32 Q with q8_0 K/V (valid), unless a
   defect puts a block format where only K/V takes one. */
#if defined(BAD_BLOCK_Q_DTYPE)
#define COMBO1 {ATTNCHECK_Q8_0, ATTNCHECK_Q8_0, ATTNCHECK_F32}
#elif defined(BAD_BLOCK_OUT)
#define COMBO1 {ATTNCHECK_F32, ATTNCHECK_Q4_0, ATTNCHECK_Q4_0}
#else
#define COMBO1 {ATTNCHECK_F32, ATTNCHECK_Q8_0, ATTNCHECK_F32}
#endif
static const attncheck_dtype_combo kCombos[] = {
    {ATTNCHECK_F64, ATTNCHECK_F64, ATTNCHECK_F64}, COMBO1};

#if defined(BAD_FTZ)
#define FTZ (1u << 4)
#else
#define FTZ 0u
#endif
#if defined(BAD_N_PATHS)
#define N_PATHS 65u
#elif defined(LAST_PATH_NO_PATHS)
#define N_PATHS 0u
#else
#define N_PATHS 2u
#endif
#if defined(BAD_NULL_PATHS) || defined(LAST_PATH_NO_PATHS)
#define PATHS 0
#else
#define PATHS kPaths
#endif

static const attncheck_impl kImpls[] = {{
    .abi_version = ATTNCHECK_ABI_VERSION,
    .name = "bad_stages",
    .dtypes = DTYPES,
    .empty_rows = ATTNCHECK_EMPTY_ROW_ERROR,
    .precision = {.accum = ATTNCHECK_F32, .p_cast = P_CAST},
    .forward = forward,
    .struct_size = sizeof(attncheck_impl),
    .s_cast = S_CAST,
    .ftz_formats = FTZ,
    .n_combos = 2,
    .combos = kCombos,
    .stages = {.set = Q_CAST_BIT | ATTNCHECK_STAGE_SCORE_ACCUM | ATTNCHECK_STAGE_SOFTMAX_ACCUM |
                      ATTNCHECK_STAGE_PV_ACCUM | EXTRA_BITS,
               .q_cast = Q_CAST, .score_accum = SCORE, .softmax_accum = SOFTMAX, .pv_accum = PV},
    .n_paths = N_PATHS,
    .paths = PATHS,
    .last_path = last_path,
}};

const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
