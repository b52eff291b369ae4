// The ONNX Runtime adapters: ONNX Runtime's CPU attention as ONNX models
// run it (transformers.js, onnxruntime-node, onnxruntime-genai), one
// adapter per op, each with a 4-thread twin:
//
//   ort_attention_f32[_mt]  the ONNX `Attention` op (opset 23), 4-D BHSD
//                           inputs: BERT-style and exported models
//   ort_gqa_f32[_mt]        com.microsoft.GroupQueryAttention:
//                           onnxruntime-genai's Phi and Llama models
//
// No suffix: one intra-op thread. _mt: 4 (ImplInfo::threads). Each
// adapter builds a one-node model per attribute set (onnx_model.h) with
// the batch and sequence lengths left symbolic, so one session serves
// every problem of that set (ort_session.h).
//
// What each op takes, from impls/onnxruntime/NOTES.md (measured on 1.30.0
// by tests/onnxruntime/ort_smoke.cpp):
// - Attention: `is_causal` aligns top-left (key j visible to query i when
//   j <= i): used for causal problems aligned top-left, or with tq = tk
//   where the alignments agree. Everything else (key padding, explicit
//   masks, windows, causal aligned bottom-right with tq != tk) travels in
//   `attn_mask`, [B|1][H|1][tq][tk], broadcast as attncheck's mask is: a
//   bool mask (true = attend), or, with a bias, a float mask holding the
//   bias where a key is allowed and -inf where it is not. `softcap` is
//   applied to the scaled score before the mask is added, as SPEC 1 adds
//   the bias after the softcap. A query whose keys are all masked out
//   gives zeros through either mask (NOTES.md; test_ort_adapters):
//   declared `zero`.
// - GroupQueryAttention: always causal, aligned bottom-right with the
//   past keys first (query i sees key j when j <= P + i); the new keys
//   are the last tq, the rest go in as past_key / past_value. It takes
//   one head size (dv = dk) that is a multiple of 8, and past keys with
//   more than one new token only in batch 1; `local_window_size` w keeps
//   exactly w keys (j > P + i - w). Everything else (non-causal with more
//   than one query, top-left with tq != tk, tq > tk, more than one new
//   token with past in a batch above 1) is refused (UNSUPPORTED, with the
//   reason). Without masks or key padding only tq > tk makes a row empty:
//   declared `error`, and reported so.
//
// Precision (both ops, f32): ONNX Runtime's CPU kernels compute in f32
// throughout (assumed from the code paths, onnxruntime/core/providers/
// cpu/llm/attention.cc and contrib_ops/cpu/bert/gqa_attention_base.h, and
// from the smoke test's 1e-7 agreement): Q K^T by MLAS's f32 GEMM with the
// scale as its alpha, S stored in f32, the softcap (MLAS tanh, 2.54 ulps
// measured, issue 52) in f32, the mask added in f32, the softmax in one
// pass over the whole row (MlasComputeSoftmax: max, exp within 0.86 ulps,
// f32 sum, division), P stored in f32 and P V by the f32 GEMM. exp_ulps
// is 3 because attncheck's exp_ulps also bounds the softcap's tanh (judge/
// tolerance.cpp). key_block 0: these paths hold the whole row (the MLAS
// flash path with its key blocks is MultiHeadAttention's, not these
// ops'). No flush: ONNX Runtime leaves MXCSR's denormal modes alone unless
// the session option session.set_denormal_as_zero is set, which it is not.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../impl_common.h"
#include "attncheck/registry.h"
#include "impls/onnxruntime/onnx_model.h"
#include "impls/onnxruntime/ort_api.h"
#include "impls/onnxruntime/ort_session.h"
#include "ort_library.h"  // generated: ATTNCHECK_ONNXRUNTIME_ORIGIN

namespace attncheck::impls::ort {
namespace {

constexpr int kMtThreads = 4;

// ONNX Runtime's f32 CPU arithmetic (see the top).
PrecisionTraits ort_f32_precision() {
  PrecisionTraits t = one_pass_precision(DType::f32);
  t.exp_ulps = 3;
  return t;
}

// A graph input or output of type `type` whose dims are values, or
// symbolic names where `params` has a non-empty one.
OnnxValueInfo value_info(const std::string& name, int type,
                         const std::vector<std::int64_t>& dims,
                         const std::vector<std::string>& params) {
  OnnxValueInfo v{name, type, {}};
  for (std::size_t i = 0; i < dims.size(); ++i) {
    v.dims.push_back({params[i].empty() ? dims[i] : 0, params[i]});
  }
  return v;
}

// The f32 value of x when it is one; false otherwise.
bool as_f32(double x, float& f) {
  f = static_cast<float>(x);
  return static_cast<double>(f) == x || std::isinf(x);
}

// q, k or v gathered into contiguous [b][heads][t][d] floats (the problem's
// strides read through at()).
std::vector<float> bhsd(const Tensor& t, std::int64_t b, std::int64_t heads, std::int64_t len,
                        std::int64_t d, std::int64_t from = 0) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(b * heads * (len - from) * d));
  for (std::int64_t ib = 0; ib < b; ++ib)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = from; s < len; ++s)
        for (std::int64_t c = 0; c < d; ++c) out.push_back(static_cast<float>(t.at(ib, h, s, c)));
  return out;
}

// The same as [b][t][heads * d] (the contrib ops' 3-D layout), keys
// [from, len) only.
std::vector<float> bshd(const Tensor& t, std::int64_t b, std::int64_t heads, std::int64_t len,
                        std::int64_t d, std::int64_t from = 0) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(b * heads * (len - from) * d));
  for (std::int64_t ib = 0; ib < b; ++ib)
    for (std::int64_t s = from; s < len; ++s)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t c = 0; c < d; ++c) out.push_back(static_cast<float>(t.at(ib, h, s, c)));
  return out;
}

ForwardResult refuse(std::string why) {
  ForwardResult r = ForwardResult::unsupported();
  r.error = std::move(why);
  return r;
}

// ---- ONNX Attention (opset 23) ----

constexpr Features kAttentionFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW |
    ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_BIAS | ATTNCHECK_FEATURE_GQA |
    ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_SOFTCAP | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT |
    ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT | ATTNCHECK_FEATURE_SCALE;

ForwardResult run_attention(const Problem& p, SessionCache& sessions) {
  // The scale is an f32 attribute: rounded to f32, as the ggml adapters
  // round it (the tolerance's gamma_{dk+2} of the q.k sums and the product
  // by the scale). The generators draw softcaps that are f32 values; one
  // that is not is refused rather than rounded.
  const float scale = static_cast<float>(p.scale);
  float softcap = 0;
  if (!as_f32(p.softcap, softcap)) {
    return refuse("the softcap is an f32 attribute of Attention: " + std::to_string(p.softcap) +
                  " is not an f32 value");
  }
  if (scale == 0) return refuse("Attention reads scale 0 as its default, 1/sqrt(dk)");
  // is_causal is top-left (NOTES.md); where the alignments agree it is
  // used, and otherwise the causal limit goes into the mask.
  const bool is_causal = p.causal && (p.align == Align::top_left || p.tq == p.tk);
  const bool causal_in_mask = p.causal && !is_causal;
  const bool window = p.window_left >= 0 || p.window_right >= 0;
  const bool has_mask = causal_in_mask || window || !p.key_valid.empty() || p.mask || p.bias;
  const bool per_batch = !p.key_valid.empty() || (p.mask && p.mask->batch > 1) ||
                         (p.bias && p.bias->batch > 1);
  const bool per_head = (p.mask && p.mask->heads > 1) || (p.bias && p.bias->heads > 1);
  const std::int64_t mb = per_batch ? p.batch : 1, mh = per_head ? p.heads : 1;

  std::vector<OrtTensorData> in;
  in.push_back(f32_tensor("Q", {p.batch, p.heads, p.tq, p.dk}, bhsd(p.q, p.batch, p.heads, p.tq, p.dk)));
  in.push_back(f32_tensor("K", {p.batch, p.kv_heads, p.tk, p.dk},
                          bhsd(p.k, p.batch, p.kv_heads, p.tk, p.dk)));
  in.push_back(f32_tensor("V", {p.batch, p.kv_heads, p.tk, p.dv},
                          bhsd(p.v, p.batch, p.kv_heads, p.tk, p.dv)));
  if (has_mask) {
    const auto allowed = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
      if (!p.key_valid.empty() && !p.key_valid[static_cast<std::size_t>(b * p.tk + j)]) return false;
      if (p.mask && !p.mask->at(b, h, i, j, p.tq, p.tk)) return false;
      if (window && !p.window_band(i).contains(j)) return false;
      return !causal_in_mask || p.causal_band(i).contains(j);
    };
    const std::vector<std::int64_t> shape{mb, mh, p.tq, p.tk};
    const std::size_t n = static_cast<std::size_t>(mb * mh * p.tq * p.tk);
    if (p.bias) {
      std::vector<float> add;
      add.reserve(n);
      for (std::int64_t b = 0; b < mb; ++b)
        for (std::int64_t h = 0; h < mh; ++h)
          for (std::int64_t i = 0; i < p.tq; ++i)
            for (std::int64_t j = 0; j < p.tk; ++j) {
              float bias = 0;
              if (!as_f32(p.bias_at(b, h, i, j), bias)) {
                return refuse("a bias element is not an f32 value (Attention's float attn_mask "
                              "carries the bias)");
              }
              add.push_back(allowed(b, h, i, j) ? bias : -std::numeric_limits<float>::infinity());
            }
      in.push_back(f32_tensor("attn_mask", shape, add));
    } else {
      OrtTensorData keep{"attn_mask", kOnnxBool, shape, {}};
      keep.bytes.reserve(n);
      for (std::int64_t b = 0; b < mb; ++b)
        for (std::int64_t h = 0; h < mh; ++h)
          for (std::int64_t i = 0; i < p.tq; ++i)
            for (std::int64_t j = 0; j < p.tk; ++j) keep.bytes.push_back(allowed(b, h, i, j) ? 1 : 0);
      in.push_back(std::move(keep));
    }
  }

  OnnxModel m;
  m.node.op_type = "Attention";
  // Batch and lengths symbolic: one session per attribute set and head
  // shape (ort_session.h).
  const std::vector<std::string> sym{"B", "", "S", ""}, sym_kv{"B", "", "T", ""};
  m.inputs.push_back(value_info("Q", kOnnxFloat, in[0].shape, sym));
  m.inputs.push_back(value_info("K", kOnnxFloat, in[1].shape, sym_kv));
  m.inputs.push_back(value_info("V", kOnnxFloat, in[2].shape, sym_kv));
  m.node.inputs = {"Q", "K", "V"};
  if (has_mask) {
    m.inputs.push_back(value_info("attn_mask", in[3].type, in[3].shape,
                                  {per_batch ? "B" : "", "", "S", "T"}));
    m.node.inputs.push_back("attn_mask");
  }
  const std::vector<std::int64_t> y_shape{p.batch, p.heads, p.tq, p.dv};
  m.outputs.push_back(value_info("Y", kOnnxFloat, y_shape, sym));
  m.node.outputs = {"Y"};
  m.node.attributes = {OnnxAttribute::of_int("is_causal", is_causal ? 1 : 0),
                       OnnxAttribute::of_float("scale", scale),
                       OnnxAttribute::of_float("softcap", softcap)};
  if (p.kv_heads != p.heads) {
    m.node.attributes.push_back(OnnxAttribute::of_int("q_num_heads", p.heads));
    m.node.attributes.push_back(OnnxAttribute::of_int("kv_num_heads", p.kv_heads));
  }
  std::vector<float> y;
  if (std::string e = sessions.run(m, in, "Y", y_shape, y); !e.empty()) {
    return ForwardResult::failure(e);
  }
  ForwardResult r;
  r.out.assign(y.begin(), y.end());
  return r;
}

// ---- com.microsoft.GroupQueryAttention ----

// Bottom-right alignment only: GroupQueryAttention has no other (a
// top-left problem with tq = tk would be the same, but the generators draw
// top-left with any tq once it is declared).
constexpr Features kGqaFeatures = ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT |
                                  ATTNCHECK_FEATURE_WINDOW | ATTNCHECK_FEATURE_GQA |
                                  ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_SOFTCAP |
                                  ATTNCHECK_FEATURE_SCALE;

// Why GroupQueryAttention cannot compute `p` exactly ("" when it can).
std::string gqa_refusal(const Problem& p) {
  if (p.tq > p.tk) {
    return "GroupQueryAttention takes tq new keys after the past ones, so tk >= tq (tq " +
           std::to_string(p.tq) + ", tk " + std::to_string(p.tk) + ")";
  }
  // Its one mask is causal bottom-right: the problem's structure must be
  // that, which a lone query (tq = 1, seeing every key) also is without
  // causal.
  const bool bottom_right = p.align == Align::bottom_right || p.tq == p.tk;
  if (p.causal ? !bottom_right : p.tq != 1) {
    return p.causal ? "GroupQueryAttention's causal mask is aligned bottom-right, this problem's "
                      "top-left with tq != tk"
                    : "GroupQueryAttention is always causal (bottom-right): a non-causal problem "
                      "with more than one query";
  }
  // Its window (local_window_size) sits left of the causal edge.
  if (!p.causal && (p.window_left >= 0 || p.window_right >= 0)) {
    return "GroupQueryAttention's window (local_window_size) is one of its causal mask";
  }
  const std::int64_t past = p.tk - p.tq;
  if (past > 0 && p.tq > 1 && p.batch > 1) {
    return "GroupQueryAttention takes past keys with more than one new token only in batch 1";
  }
  if (p.dk % 8 != 0 || p.dv != p.dk) {
    return "GroupQueryAttention takes one head size, a multiple of 8 (dk " +
           std::to_string(p.dk) + ", dv " + std::to_string(p.dv) + ")";
  }
  return "";
}

ForwardResult run_gqa(const Problem& p, SessionCache& sessions) {
  // Declared `error`: a row without keys (causal bottom-right with tq > tk)
  // is one GroupQueryAttention cannot take at all (it needs tk >= tq).
  if (auto empty = first_empty_row_error(p)) return ForwardResult::failure(*empty);
  if (std::string why = gqa_refusal(p); !why.empty()) return refuse(why);
  // The scale is an f32 attribute: rounded to f32, as the ggml adapters
  // round it (the tolerance's gamma_{dk+2} of the q.k sums and the product
  // by the scale). The generators draw softcaps that are f32 values; one
  // that is not is refused rather than rounded.
  const float scale = static_cast<float>(p.scale);
  float softcap = 0;
  if (!as_f32(p.softcap, softcap)) {
    return refuse("the softcap is an f32 attribute of GroupQueryAttention: " + std::to_string(p.softcap) +
                  " is not an f32 value");
  }
  if (scale == 0) return refuse("GroupQueryAttention reads scale 0 as its default, 1/sqrt(dk)");
  const std::int64_t past = p.tk - p.tq;
  // window_left L keeps keys j >= pos - L: local_window_size L + 1 keys
  // (NOTES.md: w keeps exactly w). The right edge is the causal one.
  const std::int64_t local_window = p.window_left >= 0 ? p.window_left + 1 : -1;

  std::vector<OrtTensorData> in;
  in.push_back(f32_tensor("query", {p.batch, p.tq, p.heads * p.dk},
                          bshd(p.q, p.batch, p.heads, p.tq, p.dk)));
  in.push_back(f32_tensor("key", {p.batch, p.tq, p.kv_heads * p.dk},
                          bshd(p.k, p.batch, p.kv_heads, p.tk, p.dk, past)));
  in.push_back(f32_tensor("value", {p.batch, p.tq, p.kv_heads * p.dv},
                          bshd(p.v, p.batch, p.kv_heads, p.tk, p.dv, past)));
  OnnxModel m;
  m.node.op_type = "GroupQueryAttention";
  m.node.domain = "com.microsoft";
  m.node.inputs = {"query", "key", "value", "", ""};
  const std::vector<std::string> sym3{"B", "S", ""};
  for (const OrtTensorData& t : in) m.inputs.push_back(value_info(t.name, kOnnxFloat, t.shape, sym3));
  const std::vector<std::string> sym_past{"B", "", "P", ""};
  if (past > 0) {
    for (const char* name : {"past_key", "past_value"}) {
      const bool keys = name[5] == 'k';
      in.push_back(f32_tensor(name, {p.batch, p.kv_heads, past, p.dk},
                              bhsd(keys ? p.k : p.v, p.batch, p.kv_heads, past, p.dk)));
      m.inputs.push_back(value_info(name, kOnnxFloat, in.back().shape, sym_past));
    }
    m.node.inputs[3] = "past_key";
    m.node.inputs[4] = "past_value";
  }
  // seqlens_k: the total length less one, per sequence; the total length
  // a scalar (rank 0).
  OrtTensorData seqlens{"seqlens_k", kOnnxInt32, {p.batch}, {}};
  const std::vector<std::int32_t> lengths(static_cast<std::size_t>(p.batch),
                                          static_cast<std::int32_t>(p.tk - 1));
  seqlens.bytes.resize(lengths.size() * sizeof(std::int32_t));
  std::memcpy(seqlens.bytes.data(), lengths.data(), seqlens.bytes.size());
  OrtTensorData total{"total_sequence_length", kOnnxInt32, {}, {}};
  const std::int32_t total_length = static_cast<std::int32_t>(p.tk);
  total.bytes.resize(sizeof total_length);
  std::memcpy(total.bytes.data(), &total_length, sizeof total_length);
  m.inputs.push_back(value_info("seqlens_k", kOnnxInt32, seqlens.shape, {"B"}));
  m.inputs.push_back(value_info("total_sequence_length", kOnnxInt32, {}, {}));
  in.push_back(std::move(seqlens));
  in.push_back(std::move(total));
  m.node.inputs.insert(m.node.inputs.end(), {"seqlens_k", "total_sequence_length"});

  const std::vector<std::int64_t> out_shape{p.batch, p.tq, p.heads * p.dv};
  m.node.outputs = {"output", "present_key", "present_value"};
  m.outputs.push_back(value_info("output", kOnnxFloat, out_shape, sym3));
  for (const char* name : {"present_key", "present_value"}) {
    m.outputs.push_back(value_info(name, kOnnxFloat, {p.batch, p.kv_heads, p.tk, p.dk},
                                   {"B", "", "T", ""}));
  }
  m.node.attributes = {OnnxAttribute::of_int("num_heads", p.heads),
                       OnnxAttribute::of_int("kv_num_heads", p.kv_heads),
                       OnnxAttribute::of_float("scale", scale),
                       OnnxAttribute::of_float("softcap", softcap),
                       OnnxAttribute::of_int("local_window_size", local_window)};
  std::vector<float> y;
  if (std::string e = sessions.run(m, in, "output", out_shape, y); !e.empty()) {
    return ForwardResult::failure(e);
  }
  // [b][tq][heads * dv] -> [b][heads][tq][dv]
  ForwardResult r;
  r.out.resize(y.size());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.tq; ++i)
      for (std::int64_t h = 0; h < p.heads; ++h)
        for (std::int64_t c = 0; c < p.dv; ++c) {
          r.out[out_index(p, b, h, i, c)] =
              y[static_cast<std::size_t>(((b * p.tq + i) * p.heads + h) * p.dv + c)];
        }
  return r;
}

// ---- registration ----

using Runner = ForwardResult (*)(const Problem&, SessionCache&);

std::shared_ptr<const Implementation> make(ImplInfo info, int threads, Runner runner) {
  info.kind = Kind::adapter;
  info.dtypes = dtype_bit(DType::f32);
  info.precision = ort_f32_precision();
  info.threads = static_cast<std::uint32_t>(threads);
  // The sessions live as long as the adapter (shared by the copies of
  // the forward function).
  auto sessions = std::make_shared<SessionCache>(threads);
  return std::make_shared<FunctionImpl>(
      std::move(info), [sessions, runner](const Problem& p) { return runner(p, *sessions); });
}

bool register_adapters() {
  // Not ort_origin(): that loads the library, which registration (`attncheck
  // list`) does not need.
  const std::string origin =
      std::string("ONNX Runtime's CPU provider from ") + ATTNCHECK_ONNXRUNTIME_ORIGIN;
  for (int threads : {1, kMtThreads}) {
    const std::string suffix = threads == 1 ? "" : "_mt";
    const std::string count = threads == 1 ? "1 thread" : std::to_string(threads) + " threads";
    ImplInfo attention;
    attention.name = "ort_attention_f32" + suffix;
    attention.features = kAttentionFeatures;
    attention.empty_rows = EmptyRowPolicy::zero;
    attention.description = "ONNX Attention (opset 23), 4-D BHSD, f32, " + count + "; " + origin;
    register_impl(make(std::move(attention), threads, run_attention));

    ImplInfo gqa;
    gqa.name = "ort_gqa_f32" + suffix;
    gqa.features = kGqaFeatures;
    gqa.empty_rows = EmptyRowPolicy::error;
    gqa.limits.dk_multiple = 8;
    gqa.limits.dv_equals_dk = true;
    gqa.description = "com.microsoft.GroupQueryAttention, f32, " + count + "; " + origin;
    register_impl(make(std::move(gqa), threads, run_gqa));
  }
  return true;
}

[[maybe_unused]] const bool kRegistered = register_adapters();

}  // namespace
}  // namespace attncheck::impls::ort
