/* A packed, paged scaled dot-product attention in plain C99, exported
 * through version 2 of attncheck's C ABI (attncheck/plugin.h): the shape
 * of a serving kernel, written for reading rather than speed.
 *
 *   attncheck check --plugin ./libexample_paged_plugin.so
 *
 * Queries are dense [b][h][tq][dk] or packed (cu_seqlens_q: sequence b owns
 * rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1); keys and values are
 * dense, packed (cu_seqlens_k) or paged (key j of sequence b is slot
 * j % page_size of page block_table[b][j / page_size]; seqlens_k[b] keys).
 * K/V come in f32 or bf16, each tensor with its descale (logical value =
 * stored value * descale), and each head may have a sink: a logit in the
 * softmax's denominator that carries no value. Per query, in double:
 * the allowed keys (causal and window at the query's position inside its
 * own sequence), scores t_j = scale * q_descale * k_descale * (q_i . k_j),
 * Z = exp(sink_h) + sum_j exp(t_j), out_i = v_descale * sum_j exp(t_j) v_j
 * / Z, lse_i = log Z. A row without keys gives out 0 and lse = sink_h with
 * a sink, lse = -inf without (the zero policy).
 *
 * Outputs: out through out_strides, packed like q when q is packed
 * (element (b, h, i, d) at (cu_seqlens_q[b] + i) * out_strides[2] + h *
 * out_strides[1] + d * out_strides[3]); lse [b][h][tq], or [h][total_q]
 * when q is packed. */
#include <attncheck/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Stored element `at` of an f32 or bf16 array, as a double. */
static double load(uint32_t dtype, const void* base, int64_t at) {
  if (dtype == ATTNCHECK_BF16) {
    uint16_t half;
    uint32_t bits;
    float f;
    memcpy(&half, (const unsigned char*)base + 2 * at, 2);
    bits = (uint32_t)half << 16; /* bf16 is the upper half of an f32 */
    memcpy(&f, &bits, 4);
    return f;
  }
  return ((const float*)base)[at];
}

static int64_t queries_of(const attncheck_problem* p, int64_t b) {
  return p->cu_seqlens_q ? p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->tq;
}

static int64_t keys_of(const attncheck_problem* p, int64_t b) {
  if (p->block_table) return p->seqlens_k[b];
  if (p->cu_seqlens_k) return p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
  return p->tk;
}

/* Offset of element (b, h, i, d) of q, or of out with out's strides. */
static int64_t row_offset(const attncheck_problem* p, const int64_t* s, int64_t b, int64_t h,
                          int64_t i, int64_t d) {
  if (p->cu_seqlens_q) return (p->cu_seqlens_q[b] + i) * s[2] + h * s[1] + d * s[3];
  return b * s[0] + h * s[1] + i * s[2] + d * s[3];
}

/* Offset of element (b, kv head g, key j, d) of k or v. */
static int64_t key_offset(const attncheck_problem* p, const int64_t* s, int64_t b, int64_t g,
                          int64_t j, int64_t d) {
  if (p->block_table) {
    const int64_t page = p->block_table[b * p->block_table_stride + j / p->page_size];
    return page * s[0] + g * s[1] + (j % p->page_size) * s[2] + d * s[3];
  }
  if (p->cu_seqlens_k) return (p->cu_seqlens_k[b] + j) * s[2] + g * s[1] + d * s[3];
  return b * s[0] + g * s[1] + j * s[2] + d * s[3];
}

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  const int64_t group = p->heads / p->kv_heads;
  const int64_t total_q = p->cu_seqlens_q ? p->cu_seqlens_q[p->batch] : p->batch * p->tq;
  const double factor = p->scale * p->q_descale * p->k_descale;
  double* e = (double*)malloc((size_t)p->tk * sizeof(double));
  int64_t b, h, i, j, d;
  (void)ctx;
  if (!e) {
    strcpy(o->error, "out of memory");
    return ATTNCHECK_ERROR;
  }
  for (b = 0; b < p->batch; ++b) {
    const int64_t nq = queries_of(p, b), nk = keys_of(p, b);
    for (h = 0; h < p->heads; ++h) {
      const int64_t g = h / group;
      for (i = 0; i < nq; ++i) {
        /* The query's position among its sequence's keys, and its keys. */
        const int64_t pos = p->align == ATTNCHECK_ALIGN_BOTTOM_RIGHT ? i + nk - nq : i;
        int64_t first = 0, last = nk - 1;
        const int64_t lse_at = p->cu_seqlens_q ? h * total_q + p->cu_seqlens_q[b] + i
                                               : (b * p->heads + h) * p->tq + i;
        double m = p->sink ? p->sink[h] : -HUGE_VAL, z = 0;
        if (p->causal && last > pos) last = pos;
        if (p->window_left >= 0 && first < pos - p->window_left) first = pos - p->window_left;
        if (p->window_right >= 0 && last > pos + p->window_right) last = pos + p->window_right;
        for (j = first; j <= last; ++j) {
          double dot = 0;
          for (d = 0; d < p->dk; ++d) {
            dot += load(p->q_dtype, p->q, row_offset(p, p->q_strides, b, h, i, d)) *
                   load(p->kv_dtype, p->k, key_offset(p, p->k_strides, b, g, j, d));
          }
          e[j] = factor * dot;
          if (e[j] > m) m = e[j];
        }
        /* exp(s - m) with m the largest score or sink: nothing overflows. */
        if (p->sink) z = exp(p->sink[h] - m);
        for (j = first; j <= last; ++j) z += e[j] = exp(e[j] - m);
        for (d = 0; d < p->dv; ++d) {
          double acc = 0;
          for (j = first; j <= last; ++j) {
            acc += e[j] * load(p->kv_dtype, p->v, key_offset(p, p->v_strides, b, g, j, d));
          }
          ((float*)o->out)[row_offset(p, o->out_strides, b, h, i, d)] =
              z > 0 ? (float)(p->v_descale * acc / z) : 0.0f;
        }
        if (o->lse) o->lse[lse_at] = z > 0 ? m + log(z) : -HUGE_VAL;
      }
    }
  }
  free(e);
  return ATTNCHECK_OK;
}

/* q and the output in f32; K/V in f32 or bf16. */
static const attncheck_dtype_combo kCombos[] = {
    {ATTNCHECK_F32, ATTNCHECK_F32, ATTNCHECK_F32},
    {ATTNCHECK_F32, ATTNCHECK_BF16, ATTNCHECK_F32},
};

/* It computes in double in one pass with the C library's exp (1 ulp) and
 * rounds the output to f32 once; nothing is flushed; no limits. */
static const attncheck_impl kImpls[] = {{
    .abi_version = ATTNCHECK_ABI_VERSION,
    .name = "example_c_paged_f32",
    .dtypes = 1u << ATTNCHECK_F32,
    .features = ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW | ATTNCHECK_FEATURE_GQA |
                ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_LSE |
                ATTNCHECK_FEATURE_ALIGN_TOP_LEFT | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT |
                ATTNCHECK_FEATURE_SCALE | ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_PACKED |
                ATTNCHECK_FEATURE_PAGED_KV | ATTNCHECK_FEATURE_DESCALE,
    .empty_rows = ATTNCHECK_EMPTY_ROW_ZERO,
    .precision = {.accum = ATTNCHECK_F64, .p_cast = ATTNCHECK_F64, .exp_ulps = 1,
                  .flush_to_zero = 0, .key_block = 0},
    .limits = {0, 0, 0, 0, 0, 0, 0},
    .forward = forward,
    .backward = NULL,
    .ctx = NULL,
    .struct_size = sizeof(attncheck_impl),
    .s_cast = ATTNCHECK_F64,
    .ftz_formats = 0,
    .n_combos = sizeof kCombos / sizeof kCombos[0],
    .combos = kCombos,
}};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kImpls / sizeof kImpls[0];
  return kImpls;
}
