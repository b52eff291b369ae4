#include "ggml_graph.h"

#include "ggml_origin.h"  // generated: ATTNCHECK_GGML_ORIGIN

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <vector>

#include <ggml-cpu.h>
#include <ggml.h>

#include "attncheck/dtype.h"

namespace attncheck::impls::ggml_adapters {
namespace {

ggml_type ggml_type_of(DType d) {
  switch (d) {
    case DType::f16: return GGML_TYPE_F16;
    case DType::bf16: return GGML_TYPE_BF16;
    case DType::f32: return GGML_TYPE_F32;
    case DType::q8_0: return GGML_TYPE_Q8_0;
    case DType::q4_0: return GGML_TYPE_Q4_0;
    default: throw std::invalid_argument("ggml adapters: no K/V format " + std::string(dtype_name(d)));
  }
}

// ggml_cpu_init fills ggml's conversion tables; once per process.
void init_once() {
  static std::once_flag once;
  std::call_once(once, [] { ggml_cpu_init(); });
}

struct ContextDeleter {
  void operator()(ggml_context* c) const { ggml_free(c); }
};
using Context = std::unique_ptr<ggml_context, ContextDeleter>;

// Writes the double x (a value of format `type`, checked by the problem's
// validation) into element `index` of a tensor of that type.
void store(ggml_tensor* t, size_t index, double x) {
  switch (t->type) {
    case GGML_TYPE_F32: static_cast<float*>(t->data)[index] = static_cast<float>(x); break;
    case GGML_TYPE_F16:
      static_cast<ggml_fp16_t*>(t->data)[index] = ggml_fp32_to_fp16(static_cast<float>(x));
      break;
    case GGML_TYPE_BF16:
      static_cast<ggml_bf16_t*>(t->data)[index] = ggml_fp32_to_bf16(static_cast<float>(x));
      break;
    default: throw std::logic_error("ggml adapters: tensor type");
  }
}

// Writes `values` as row `row` of a contiguous tensor whose rows hold
// values.size() elements: element by element (store), or for q8_0 / q4_0
// block by block in ggml's layout, the canonical block of each 32 values
// (encode_values, which throws naming the values when no block holds them:
// a problem that validates has none such).
void store_row(ggml_tensor* t, DType format, size_t row, std::span<const double> values) {
  if (!is_block_format(format)) {
    for (size_t d = 0; d < values.size(); ++d) store(t, row * values.size() + d, values[d]);
    return;
  }
  const size_t row_bytes = ggml_row_size(t->type, static_cast<int64_t>(values.size()));
  auto* at = static_cast<unsigned char*>(t->data) + row * row_bytes;
  for (size_t start = 0; start < values.size(); start += kBlockValues, at += block_bytes(format))
    encode_values(format, values.subspan(start, kBlockValues), at);
}

// The constraints of SPEC 1 (key padding, causal, window, explicit mask)
// and the bias, as ggml takes them: one additive f16 mask [tk][tq][mh][mb]
// (ggml's ne order), -inf where a key is not allowed, the bias elsewhere.
// It broadcasts over the heads (mh = 1) and the batch (mb = 1) where the
// problem's parts do. nullptr when there is nothing to mask; false when a
// bias element is not an f16 value (the mask cannot carry it).
bool fill_mask(ggml_context* ctx, const Problem& p, ggml_tensor** out) {
  const bool structural = p.causal || p.window_left >= 0 || p.window_right >= 0;
  if (!structural && p.key_valid.empty() && !p.mask && !p.bias) {
    *out = nullptr;
    return true;
  }
  const bool per_head = (p.mask && p.mask->heads > 1) || (p.bias && p.bias->heads > 1);
  const bool per_batch =
      !p.key_valid.empty() || (p.mask && p.mask->batch > 1) || (p.bias && p.bias->batch > 1);
  const int64_t mh = per_head ? p.heads : 1, mb = per_batch ? p.batch : 1;
  ggml_tensor* m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, p.tk, p.tq, mh, mb);
  auto* data = static_cast<ggml_fp16_t*>(m->data);
  const ggml_fp16_t minus_inf = ggml_fp32_to_fp16(-std::numeric_limits<float>::infinity());
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t h = 0; h < mh; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          const size_t at = static_cast<size_t>(((b * mh + h) * p.tq + i) * p.tk + j);
          if (!p.allowed(b, h, i, j)) {
            data[at] = minus_inf;
            continue;
          }
          const double bias = p.bias_at(b, h, i, j);
          data[at] = ggml_fp32_to_fp16(static_cast<float>(bias));
          if (static_cast<double>(ggml_fp16_to_fp32(data[at])) != bias) return false;
        }
  *out = m;
  return true;
}

}  // namespace

int ggml_f32_epr() {
  if (ggml_cpu_has_avx512()) return 16;
  if (ggml_cpu_has_avx()) return 8;
  return 4;
}

bool f16_dot_sums_in_f16() {
  static const bool in_f16 = [] {
    init_once();
    // 256 elements: the f16 dot's widest unrolling (4 registers of 32
    // lanes) puts elements 0 and 128 in the same lane, summed one after
    // the other; 1 + 2^-12 is 1 in f16 (2^-11 is half its ulp at 1).
    std::vector<ggml_fp16_t> x(256, ggml_fp32_to_fp16(0.0f)), y(256, ggml_fp32_to_fp16(1.0f));
    x[0] = ggml_fp32_to_fp16(1.0f);
    x[128] = ggml_fp32_to_fp16(std::ldexp(1.0f, -12));
    float s = 0;
    ggml_get_type_traits_cpu(GGML_TYPE_F16)->vec_dot(256, &s, 0, x.data(), 0, y.data(), 0, 1);
    return s == 1.0f;
  }();
  return in_f16;
}

const char* flash_path(const Problem& p, const GgmlSetup& s) {
  const bool kv_f32_or_f16 = s.kv == DType::f16 || s.kv == DType::f32;
  if (!s.use_ref && p.tq == 1 && p.batch == 1 && kv_f32_or_f16 && p.tk >= 512) return kPathSplitKv;
  if (!s.use_ref && kv_f32_or_f16 && p.tq >= 64 && p.dv % ggml_f32_epr() == 0) return kPathTiled;
  return kPathVec;
}

ForwardResult run(const Problem& p, const GgmlSetup& s, const std::vector<ImplPath>& paths) {
  init_once();
  const ggml_type kv_type = ggml_type_of(s.kv);
  const bool blocks = is_block_format(s.kv);
  const int64_t B = p.batch, H = p.heads, G = p.kv_heads;
  const bool softcap = p.softcap > 0;
  // V stored transposed: the soft_max graph of an element format, as
  // llama.cpp's cache keeps V without flash attention (v_trans). A block
  // format cannot be transposed (its blocks run along dv): the soft_max
  // graph keeps V in rows of dv and dequantizes and transposes it itself.
  const bool v_trans = s.graph == Graph::softmax && !blocks;

  // Memory for every tensor's data, their headers and the graph's.
  const size_t f32 = sizeof(float);
  size_t bytes = static_cast<size_t>(B * H * p.tq * p.dk) * f32 +
                 ggml_row_size(kv_type, p.dk) * static_cast<size_t>(B * G * p.tk) +
                 ggml_row_size(kv_type, p.dv) * static_cast<size_t>(B * G * p.tk) +
                 static_cast<size_t>(B * H * p.tq * p.tk) * sizeof(ggml_fp16_t) +
                 static_cast<size_t>(H) * f32 + static_cast<size_t>(B * H * p.tq * p.dv) * f32;
  // The soft_max graph's score tensors: kq, the soft_max, and with a
  // softcap the scale, tanh and scale between them; with block V, V in f32
  // and its transposed copy.
  if (s.graph == Graph::softmax) {
    bytes += static_cast<size_t>(B * H * p.tq * p.tk) * f32 * (softcap ? 5 : 2);
    if (blocks) bytes += static_cast<size_t>(B * G * p.tk * p.dv) * f32 * 2;
  }
  bytes += 32 * ggml_tensor_overhead() + ggml_graph_overhead() + (1u << 20);
  ggml_init_params params{bytes, nullptr, false};
  Context ctx(ggml_init(params));
  if (!ctx) return ForwardResult::failure("ggml_init failed for " + std::to_string(bytes) + " bytes");
  ggml_context* c = ctx.get();

  // q [dk][tq][H][B] in ggml's ne order is attncheck's [B][H][tq][dk].
  ggml_tensor* q = ggml_new_tensor_4d(c, GGML_TYPE_F32, p.dk, p.tq, H, B);
  ggml_tensor* k = ggml_new_tensor_4d(c, kv_type, p.dk, p.tk, G, B);
  ggml_tensor* v = v_trans ? ggml_new_tensor_4d(c, kv_type, p.tk, p.dv, G, B)
                           : ggml_new_tensor_4d(c, kv_type, p.dv, p.tk, G, B);
  std::vector<double> row(static_cast<size_t>(std::max(p.dk, p.dv)));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d)
          store(q, static_cast<size_t>(((b * H + h) * p.tq + i) * p.dk + d), p.q_at(b, h, i, d));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        const size_t r = static_cast<size_t>((b * G + g) * p.tk + j);
        for (int64_t d = 0; d < p.dk; ++d) row[static_cast<size_t>(d)] = p.k_at(b, g, j, d);
        store_row(k, s.kv, r, std::span<const double>(row).first(static_cast<size_t>(p.dk)));
        if (v_trans) {
          for (int64_t d = 0; d < p.dv; ++d)
            store(v, static_cast<size_t>(((b * G + g) * p.dv + d) * p.tk + j), p.v_at(b, g, j, d));
          continue;
        }
        for (int64_t d = 0; d < p.dv; ++d) row[static_cast<size_t>(d)] = p.v_at(b, g, j, d);
        store_row(v, s.kv, r, std::span<const double>(row).first(static_cast<size_t>(p.dv)));
      }
  }
  ggml_tensor* mask = nullptr;
  if (!fill_mask(c, p, &mask)) return ForwardResult::unsupported();
  ggml_tensor* sinks = nullptr;
  if (!p.sink.empty()) {
    sinks = ggml_new_tensor_1d(c, GGML_TYPE_F32, H);
    for (int64_t h = 0; h < H; ++h) store(sinks, static_cast<size_t>(h), p.sink[static_cast<size_t>(h)]);
  }
  const float scale = static_cast<float>(p.scale);
  const float cap = static_cast<float>(p.softcap);

  ggml_tensor* out = nullptr;
  if (s.graph == Graph::flash) {
    out = ggml_flash_attn_ext(c, q, k, v, mask, scale, 0.0f, softcap ? cap : 0.0f);
    if (sinks) ggml_flash_attn_ext_add_sinks(out, sinks);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);  // as llama.cpp sets it
  } else {
    ggml_tensor* kq = ggml_mul_mat(c, k, q);  // [tk][tq][H][B]
    ggml_mul_mat_set_prec(kq, GGML_PREC_F32);
    float softmax_scale = scale;
    if (softcap) {
      // llama.cpp: kq = c tanh(kq / c) with Q scaled beforehand; here the
      // scale joins 1/c (one f32 multiply), and the softmax scales by 1.
      kq = ggml_scale(c, kq, static_cast<float>(p.scale / p.softcap));
      kq = ggml_tanh(c, kq);
      kq = ggml_scale(c, kq, cap);
      softmax_scale = 1.0f;
    }
    kq = ggml_soft_max_ext(c, kq, mask, softmax_scale, 0.0f);
    if (sinks) ggml_soft_max_add_sinks(kq, sinks);
    // Block V: dequantized to f32 in the graph (exact: an f16 scale times
    // an integer of at most 8 bits has at most 19 significant bits), then
    // transposed into [tk] rows. llama.cpp refuses a quantized V cache
    // without flash attention; this is the nearest graph that keeps V's
    // values (an f16 copy would round them). P then stays in f32.
    ggml_tensor* vt = blocks ? ggml_cont(c, ggml_transpose(c, ggml_cast(c, v, GGML_TYPE_F32))) : v;
    out = ggml_mul_mat(c, vt, kq);  // [dv][tq][H][B]
  }

  ggml_cgraph* graph = ggml_new_graph(c);
  ggml_build_forward_expand(graph, out);
  ggml_cplan plan = ggml_graph_plan(graph, s.threads, nullptr);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  plan.use_ref = s.use_ref;
  if (const ggml_status status = ggml_graph_compute(graph, &plan); status != GGML_STATUS_SUCCESS) {
    return ForwardResult::failure(std::string("ggml_graph_compute: ") + ggml_status_to_string(status));
  }

  ForwardResult r;
  r.out.resize(static_cast<size_t>(B * H * p.tq * p.dv));
  const auto* o = static_cast<const float*>(out->data);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d) {
          // flash: [dv][H][tq][B] (ggml permutes heads and rows); soft_max
          // graph: [dv][tq][H][B].
          const size_t from = s.graph == Graph::flash
                                  ? static_cast<size_t>(((b * p.tq + i) * H + h) * p.dv + d)
                                  : static_cast<size_t>(((b * H + h) * p.tq + i) * p.dv + d);
          r.out[out_index(p, b, h, i, d)] = static_cast<double>(o[from]);
        }
  if (s.graph == Graph::flash) {
    const std::string name = flash_path(p, s);
    for (size_t i = 0; i < paths.size(); ++i)
      if (paths[i].name == name) r.path = static_cast<int>(i);
  }
  return r;
}

std::string ggml_origin() { return ATTNCHECK_GGML_ORIGIN; }

}  // namespace attncheck::impls::ggml_adapters
