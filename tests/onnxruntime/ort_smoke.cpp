// Smoke test of the ONNX Runtime foundation (issue 52): loads the pinned
// library (ci/fetch-onnxruntime), builds one-node models of the three
// attention ops the adapters will wrap, runs small cases with 1 and 4
// intra-op threads and compares each output with a double-precision
// softmax(S) V. It also measures the facts the adapters' declarations rest
// on (causal alignment, GroupQueryAttention's window, MultiHeadAttention's
// mask fill, empty rows) as probes: a probe prints which reading matches
// and fails only when none does where one must.
// Standalone, before the adapters have a CMake target:
//   g++ -std=c++20 -O1 -I. impls/onnxruntime/*.cpp tests/onnxruntime/ort_smoke.cpp -ldl
//   ./a.out [path/to/libonnxruntime.so.1]
// Exit status 0 when every case agrees, 1 on a mismatch, 2 when the
// library cannot be loaded.

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "impls/onnxruntime/onnx_model.h"
#include "impls/onnxruntime/ort_api.h"

namespace ort = attncheck::impls::ort;
using ort::OnnxAttribute;
using ort::OnnxModel;
using ort::OnnxValueInfo;

namespace {

const ort::OrtApi* g_api = nullptr;
ort::OrtEnv* g_env = nullptr;
int g_failures = 0;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A graph input's value: its element type, shape and bytes.
struct Tensor {
  std::string name;
  int type = ort::kOnnxFloat;
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
};

template <typename T>
Tensor make_tensor(std::string name, int type, std::vector<std::int64_t> shape,
                   const std::vector<T>& values) {
  Tensor t{std::move(name), type, std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(T));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// Values as the op reads them: f32, or rounded to f16 (GCC's _Float16).
Tensor float_tensor(std::string name, bool f16, std::vector<std::int64_t> shape,
                    const std::vector<double>& values) {
  if (!f16) {
    return make_tensor(std::move(name), ort::kOnnxFloat, std::move(shape),
                       std::vector<float>(values.begin(), values.end()));
  }
  std::vector<_Float16> halves(values.begin(), values.end());
  return make_tensor(std::move(name), ort::kOnnxFloat16, std::move(shape), halves);
}

OnnxValueInfo info_of(const Tensor& t) {
  OnnxValueInfo v{t.name, t.type, {}};
  for (std::int64_t d : t.shape) v.dims.push_back({d, ""});
  return v;
}

// Prints and swallows a failed call's status.
bool ok(ort::OrtStatus* status, const char* what) {
  std::string message = ort::take_status(*g_api, status);
  if (message.empty()) return true;
  std::printf("    %s failed: %s\n", what, message.c_str());
  return false;
}

ort::OrtSessionOptions* session_options(int threads) {
  ort::OrtSessionOptions* options = nullptr;
  if (!ok(g_api->CreateSessionOptions(&options), "CreateSessionOptions")) return nullptr;
  // Idle pool threads would otherwise spin between runs and take the CPU
  // from the oracle and from other workers.
  bool set = ok(g_api->SetIntraOpNumThreads(options, threads), "SetIntraOpNumThreads") &&
             ok(g_api->SetInterOpNumThreads(options, 1), "SetInterOpNumThreads") &&
             ok(g_api->SetSessionGraphOptimizationLevel(options, ort::kOrtEnableAll),
                "SetSessionGraphOptimizationLevel") &&
             ok(g_api->DisableMemPattern(options), "DisableMemPattern") &&
             ok(g_api->AddSessionConfigEntry(options, "session.intra_op.allow_spinning", "0"),
                "AddSessionConfigEntry");
  if (!set) {
    g_api->ReleaseSessionOptions(options);
    return nullptr;
  }
  return options;
}

// The output's elements as doubles, or empty when its shape is not
// `expected` or its type not f32 / f16.
std::vector<double> read_output(ort::OrtValue* out, const std::vector<std::int64_t>& expected) {
  int is_tensor = 0;
  ort::OrtTensorTypeAndShapeInfo* info = nullptr;
  if (!ok(g_api->IsTensor(out, &is_tensor), "IsTensor") || !is_tensor ||
      !ok(g_api->GetTensorTypeAndShape(out, &info), "GetTensorTypeAndShape")) {
    return {};
  }
  std::size_t rank = 0;
  int type = 0;
  std::vector<std::int64_t> dims;
  bool good = ok(g_api->GetDimensionsCount(info, &rank), "GetDimensionsCount") &&
              ok(g_api->GetTensorElementType(info, &type), "GetTensorElementType");
  if (good) {
    dims.resize(rank);
    good = ok(g_api->GetDimensions(info, dims.data(), rank), "GetDimensions");
  }
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  void* data = nullptr;
  if (!good || dims != expected || !ok(g_api->GetTensorMutableData(out, &data), "data")) {
    std::printf("    output shape or type is not the one expected\n");
    return {};
  }
  std::size_t n = 1;
  for (std::int64_t d : dims) n *= static_cast<std::size_t>(d);
  std::vector<double> result(n);
  for (std::size_t i = 0; i < n; ++i) {
    result[i] = type == ort::kOnnxFloat16 ? static_cast<double>(static_cast<_Float16*>(data)[i])
                                          : static_cast<double>(static_cast<float*>(data)[i]);
  }
  return result;
}

// Runs `model` once on `inputs` and returns its output `output`, checked to
// have `expected_shape`; empty on an error (printed).
std::vector<double> run_model(const OnnxModel& model, std::vector<Tensor>& inputs,
                              const std::string& output,
                              const std::vector<std::int64_t>& expected_shape, int threads,
                              ort::OrtSessionOptions* options = nullptr) {
  std::string bytes = ort::serialize(model);
  bool own_options = options == nullptr;
  if (own_options) options = session_options(threads);
  ort::OrtSession* session = nullptr;
  ort::OrtMemoryInfo* memory = nullptr;
  std::vector<ort::OrtValue*> values;
  std::vector<const char*> names;
  ort::OrtValue* out = nullptr;
  bool good =
      options &&
      ok(g_api->CreateSessionFromArray(g_env, bytes.data(), bytes.size(), options, &session),
         "CreateSessionFromArray") &&
      ok(g_api->CreateCpuMemoryInfo(ort::kOrtArenaAllocator, ort::kOrtMemTypeDefault, &memory),
         "CreateCpuMemoryInfo");
  for (Tensor& t : inputs) {
    ort::OrtValue* v = nullptr;
    good = good &&
           ok(g_api->CreateTensorWithDataAsOrtValue(memory, t.bytes.data(), t.bytes.size(),
                                                    t.shape.data(), t.shape.size(), t.type, &v),
              "CreateTensorWithDataAsOrtValue");
    values.push_back(v);
    names.push_back(t.name.c_str());
  }
  const char* output_name = output.c_str();
  good = good && ok(g_api->Run(session, nullptr, names.data(), values.data(), values.size(),
                               &output_name, 1, &out),
                    "Run");
  std::vector<double> result = good ? read_output(out, expected_shape) : std::vector<double>{};
  if (out) g_api->ReleaseValue(out);
  for (ort::OrtValue* v : values) g_api->ReleaseValue(v);
  if (memory) g_api->ReleaseMemoryInfo(memory);
  if (session) g_api->ReleaseSession(session);
  if (own_options && options) g_api->ReleaseSessionOptions(options);
  return result;
}

// An attention problem in BHSD layout, with grouped K/V heads
// (query head h reads K/V head h / (heads / kv_heads)) and an additive
// bias per score (-inf for a masked key).
struct Problem {
  int batch = 1, heads = 1, kv_heads = 1, tq = 1, tk = 1, dk = 8, dv = 8;
  double scale = 0, softcap = 0;
  std::vector<double> q, k, v;
  std::function<double(int b, int h, int i, int j)> bias = [](int, int, int, int) { return 0.0; };
};

// Rounds values to f16 where the op reads f16, so that the reference
// starts from the same inputs.
std::vector<double> uniform(std::mt19937& rng, std::size_t n, bool f16, double range = 1) {
  std::uniform_real_distribution<double> dist(-range, range);
  std::vector<double> x(n);
  for (double& e : x) e = f16 ? static_cast<double>(static_cast<_Float16>(dist(rng))) : dist(rng);
  return x;
}

Problem random_problem(std::mt19937& rng, int batch, int heads, int kv_heads, int tq, int tk, int d,
                       bool f16) {
  Problem p;
  p.batch = batch, p.heads = heads, p.kv_heads = kv_heads, p.tq = tq, p.tk = tk;
  p.dk = p.dv = d;
  p.scale = 1 / std::sqrt(static_cast<double>(d));
  p.q = uniform(rng, static_cast<std::size_t>(batch) * heads * tq * d, f16, 2);
  p.k = uniform(rng, static_cast<std::size_t>(batch) * kv_heads * tk * d, f16, 2);
  p.v = uniform(rng, static_cast<std::size_t>(batch) * kv_heads * tk * d, f16);
  return p;
}

// softmax(scale Q K^T, softcapped, + bias) V in double, BHSD; a row whose
// keys are all masked is zero.
std::vector<double> reference(const Problem& p) {
  std::vector<double> out(static_cast<std::size_t>(p.batch) * p.heads * p.tq * p.dv, 0.0);
  std::vector<double> s(p.tk);
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads; ++h) {
      int g = h / (p.heads / p.kv_heads);
      const double* kb = &p.k[(static_cast<std::size_t>(b) * p.kv_heads + g) * p.tk * p.dk];
      const double* vb = &p.v[(static_cast<std::size_t>(b) * p.kv_heads + g) * p.tk * p.dv];
      for (int i = 0; i < p.tq; ++i) {
        const double* qi = &p.q[((static_cast<std::size_t>(b) * p.heads + h) * p.tq + i) * p.dk];
        double top = -kInf;
        for (int j = 0; j < p.tk; ++j) {
          double dot = 0;
          for (int c = 0; c < p.dk; ++c) dot += qi[c] * kb[j * p.dk + c];
          dot *= p.scale;
          if (p.softcap > 0) dot = p.softcap * std::tanh(dot / p.softcap);
          s[j] = dot + p.bias(b, h, i, j);
          top = std::max(top, s[j]);
        }
        if (top == -kInf) continue;
        double sum = 0;
        for (int j = 0; j < p.tk; ++j) sum += s[j] = std::exp(s[j] - top);
        double* o = &out[((static_cast<std::size_t>(b) * p.heads + h) * p.tq + i) * p.dv];
        for (int j = 0; j < p.tk; ++j) {
          for (int c = 0; c < p.dv; ++c) o[c] += s[j] / sum * vb[j * p.dv + c];
        }
      }
    }
  }
  return out;
}

// [B, N, S, D] -> [B, S, N * D], the layout of the contrib ops' 3-D inputs.
std::vector<double> bnsd_to_bsnd(const std::vector<double>& x, int b, int n, int s, int d) {
  std::vector<double> y(x.size());
  for (int ib = 0; ib < b; ++ib)
    for (int in = 0; in < n; ++in)
      for (int is = 0; is < s; ++is)
        for (int id = 0; id < d; ++id)
          y[((static_cast<std::size_t>(ib) * s + is) * n + in) * d + id] =
              x[((static_cast<std::size_t>(ib) * n + in) * s + is) * d + id];
  return y;
}

// Keys [from, to) of each row of a [B, N, T, D] tensor.
std::vector<double> key_slice(const std::vector<double>& x, int b, int n, int t, int d, int from,
                              int to) {
  std::vector<double> y;
  for (int r = 0; r < b * n; ++r)
    y.insert(y.end(), x.begin() + (static_cast<std::size_t>(r) * t + from) * d,
             x.begin() + (static_cast<std::size_t>(r) * t + to) * d);
  return y;
}

double max_abs_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return kInf;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(got[i] - want[i]);
    if (!(e <= worst)) worst = std::isnan(e) ? kInf : e;
  }
  return worst;
}

// One case: what the op computed with 1 and 4 threads against the
// reference; also says whether the two thread counts agree bitwise.
void check(const std::string& label, const std::vector<double>& want, double tolerance,
           const std::function<std::vector<double>(int threads)>& run) {
  std::vector<double> one = run(1), four = run(4);
  double e1 = max_abs_error(one, want), e4 = max_abs_error(four, want);
  bool pass = e1 <= tolerance && e4 <= tolerance;
  std::printf("%-4s %-52s max abs err 1t %.3g 4t %.3g (tol %g)%s\n", pass ? "ok" : "FAIL",
              label.c_str(), e1, e4, tolerance, one == four ? ", 1t == 4t bitwise" : "");
  if (!pass) ++g_failures;
}

// A probe: which of the candidate readings the op's output matches.
std::string probe(const std::string& label, const std::vector<double>& got, double tolerance,
                  const std::vector<std::pair<std::string, std::vector<double>>>& readings) {
  std::string matched = "none";
  std::printf("probe %s:", label.c_str());
  for (const auto& [name, want] : readings) {
    double e = max_abs_error(got, want);
    std::printf(" %s %.3g", name.c_str(), e);
    if (e <= tolerance && matched == "none") matched = name;
  }
  std::printf(" -> %s\n", matched.c_str());
  return matched;
}

// ---- ONNX Attention (opset 23): 4-D Q [B, H, S, D], K/V [B, Hkv, T, D] ----

enum class Mask { none, boolean, additive };

struct AttentionCase {
  bool f16 = false;
  bool causal = false;
  Mask mask = Mask::none;
  std::vector<double> mask_values;  ///< [S, T]: 1 keep / 0 drop, or the additive bias
};

std::vector<double> run_attention(const Problem& p, const AttentionCase& c, int threads,
                                  ort::OrtSessionOptions* options = nullptr) {
  std::vector<std::int64_t> q_shape{p.batch, p.heads, p.tq, p.dk};
  std::vector<std::int64_t> k_shape{p.batch, p.kv_heads, p.tk, p.dk};
  std::vector<std::int64_t> v_shape{p.batch, p.kv_heads, p.tk, p.dv};
  std::vector<Tensor> in{float_tensor("Q", c.f16, q_shape, p.q),
                         float_tensor("K", c.f16, k_shape, p.k),
                         float_tensor("V", c.f16, v_shape, p.v)};
  if (c.mask == Mask::boolean) {
    std::vector<char> keep(c.mask_values.begin(), c.mask_values.end());
    in.push_back(make_tensor("attn_mask", ort::kOnnxBool, {p.tq, p.tk}, keep));
  } else if (c.mask == Mask::additive) {
    in.push_back(float_tensor("attn_mask", c.f16, {p.tq, p.tk}, c.mask_values));
  }
  OnnxModel m;
  m.node.op_type = "Attention";
  for (const Tensor& t : in) {
    m.node.inputs.push_back(t.name);
    m.inputs.push_back(info_of(t));
  }
  m.node.outputs = {"Y"};
  std::vector<std::int64_t> y_shape{p.batch, p.heads, p.tq, p.dv};
  m.outputs.push_back({"Y", c.f16 ? ort::kOnnxFloat16 : ort::kOnnxFloat, {}});
  for (std::int64_t d : y_shape) m.outputs.back().dims.push_back({d, ""});
  m.node.attributes = {OnnxAttribute::of_int("is_causal", c.causal),
                       OnnxAttribute::of_float("scale", static_cast<float>(p.scale)),
                       OnnxAttribute::of_float("softcap", static_cast<float>(p.softcap))};
  if (p.kv_heads != p.heads) {
    m.node.attributes.push_back(OnnxAttribute::of_int("q_num_heads", p.heads));
    m.node.attributes.push_back(OnnxAttribute::of_int("kv_num_heads", p.kv_heads));
  }
  return run_model(m, in, "Y", y_shape, threads, options);
}

// Key j is visible to query i under causal masking aligned top-left
// (j <= i) or bottom-right (j <= i + tk - tq).
std::function<double(int, int, int, int)> causal_bias(int tq, int tk, bool bottom_right,
                                                      int window = -1) {
  int shift = bottom_right ? tk - tq : 0;
  return [=](int, int, int i, int j) {
    bool visible = j <= i + shift && (window < 0 || i + shift - j < window);
    return visible ? 0.0 : -kInf;
  };
}

void attention_cases(std::mt19937& rng) {
  for (bool f16 : {false, true}) {
    double tol = f16 ? 1e-2 : 1e-4;
    std::string dt = f16 ? "f16" : "f32";
    Problem p = random_problem(rng, 2, 4, 4, 5, 7, 8, f16);
    AttentionCase c{f16, false, Mask::none, {}};
    check("Attention " + dt + " plain", reference(p), tol,
          [&](int t) { return run_attention(p, c, t); });
    Problem g = random_problem(rng, 2, 4, 2, 5, 7, 8, f16);
    g.scale = 0.3, g.softcap = 5;
    check("Attention " + dt + " grouped K/V, scale 0.3, softcap 5", reference(g), tol,
          [&](int t) { return run_attention(g, c, t); });
    Problem s = random_problem(rng, 2, 4, 4, 6, 6, 8, f16);
    s.bias = causal_bias(6, 6, false);
    AttentionCase causal{f16, true, Mask::none, {}};
    check("Attention " + dt + " is_causal, tq = tk", reference(s), tol,
          [&](int t) { return run_attention(s, causal, t); });
  }
  // A boolean mask with row 2 fully masked: 1.30.0 returns zeros there.
  Problem p = random_problem(rng, 2, 4, 4, 5, 7, 8, false);
  AttentionCase c{false, false, Mask::boolean, std::vector<double>(5 * 7)};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) c.mask_values[i * 7 + j] = i != 2 && (i + j) % 3 != 0;
  p.bias = [&](int, int, int i, int j) { return c.mask_values[i * 7 + j] ? 0.0 : -kInf; };
  check("Attention f32 bool mask, row 2 empty (zeros)", reference(p), 1e-4,
        [&](int t) { return run_attention(p, c, t); });
  AttentionCase a{false, false, Mask::additive, uniform(rng, 5 * 7, false, 3)};
  p.bias = [&](int, int, int i, int j) { return a.mask_values[i * 7 + j]; };
  check("Attention f32 float mask", reference(p), 1e-4,
        [&](int t) { return run_attention(p, a, t); });
  // Which corner is_causal aligns to when tq < tk (no past).
  Problem r = random_problem(rng, 1, 2, 2, 3, 7, 8, false);
  AttentionCase causal{false, true, Mask::none, {}};
  std::vector<double> got = run_attention(r, causal, 1);
  r.bias = causal_bias(3, 7, false);
  std::vector<double> top_left = reference(r);
  r.bias = causal_bias(3, 7, true);
  probe("Attention is_causal alignment, tq 3 < tk 7", got, 1e-4,
        {{"top_left", top_left}, {"bottom_right", reference(r)}});
}

// ---- com.microsoft.MultiHeadAttention: 3-D [B, S, H * D] ----

struct MhaCase {
  bool unidirectional = false;
  std::vector<std::int32_t> key_padding;  ///< [B, T], 1 keep / 0 drop; empty for none
  bool set_fill = false;
  float mask_filter_value = 0;
};

std::vector<double> run_mha(const Problem& p, const MhaCase& c, int threads) {
  std::vector<Tensor> in{float_tensor("query", false, {p.batch, p.tq, p.heads * p.dk},
                                      bnsd_to_bsnd(p.q, p.batch, p.heads, p.tq, p.dk)),
                         float_tensor("key", false, {p.batch, p.tk, p.heads * p.dk},
                                      bnsd_to_bsnd(p.k, p.batch, p.heads, p.tk, p.dk)),
                         float_tensor("value", false, {p.batch, p.tk, p.heads * p.dv},
                                      bnsd_to_bsnd(p.v, p.batch, p.heads, p.tk, p.dv))};
  OnnxModel m;
  m.node.op_type = "MultiHeadAttention";
  m.node.domain = "com.microsoft";
  m.node.inputs = {"query", "key", "value"};
  if (!c.key_padding.empty()) {
    in.push_back(make_tensor("key_padding_mask", ort::kOnnxInt32, {p.batch, p.tk}, c.key_padding));
    m.node.inputs.insert(m.node.inputs.end(), {"", "key_padding_mask"});  // input 3: bias
  }
  for (const Tensor& t : in) m.inputs.push_back(info_of(t));
  m.node.outputs = {"output"};
  std::vector<std::int64_t> out_shape{p.batch, p.tq, p.heads * p.dv};
  m.outputs.push_back({"output", ort::kOnnxFloat, {}});
  for (std::int64_t d : out_shape) m.outputs.back().dims.push_back({d, ""});
  m.node.attributes = {OnnxAttribute::of_int("num_heads", p.heads),
                       OnnxAttribute::of_float("scale", static_cast<float>(p.scale)),
                       OnnxAttribute::of_int("unidirectional", c.unidirectional)};
  if (c.set_fill) {
    m.node.attributes.push_back(OnnxAttribute::of_float("mask_filter_value", c.mask_filter_value));
  }
  return run_model(m, in, "output", out_shape, threads);
}

void mha_cases(std::mt19937& rng) {
  auto as_bshd = [](const Problem& p) {
    return bnsd_to_bsnd(reference(p), p.batch, p.heads, p.tq, p.dv);
  };
  Problem p = random_problem(rng, 2, 4, 4, 5, 7, 8, false);
  p.scale = 0.4;
  check("MultiHeadAttention f32 plain, scale 0.4", as_bshd(p), 1e-4,
        [&](int t) { return run_mha(p, MhaCase{}, t); });
  Problem s = random_problem(rng, 2, 4, 4, 6, 6, 8, false);
  s.bias = causal_bias(6, 6, false);
  check("MultiHeadAttention f32 unidirectional, tq = tk", as_bshd(s), 1e-4, [&](int t) {
    return run_mha(s, MhaCase{true, {}, false, 0}, t);
  });
  // Key padding, no row fully padded: the default fill, -10000, is as
  // good as -inf here (e^-10000 is 0 in any format).
  MhaCase pad{false, std::vector<std::int32_t>(2 * 7, 1), false, 0};
  pad.key_padding[2] = pad.key_padding[5] = pad.key_padding[7] = pad.key_padding[13] = 0;
  auto fill = [&](double value) {
    return [&pad, value](int b, int, int, int j) { return pad.key_padding[b * 7 + j] ? 0 : value; };
  };
  p.bias = fill(-kInf);
  check("MultiHeadAttention f32 key_padding_mask, default fill", as_bshd(p), 1e-4,
        [&](int t) { return run_mha(p, pad, t); });
  // The default fill is added to the score: with q large enough a padded
  // key still wins under -10000, never under a hard mask.
  Problem big = p;
  for (double& e : big.q) e *= 4096;
  std::vector<double> got = run_mha(big, pad, 1);
  big.bias = fill(-10000.0);
  std::vector<double> soft = as_bshd(big);
  big.bias = fill(-kInf);
  probe("MultiHeadAttention default mask_filter_value, q * 4096", got, 1e-3,
        {{"-10000", soft}, {"-inf", as_bshd(big)}});
  // Batch 1 fully padded: -10000 shifts every score alike, so the row is
  // the unpadded attention (within the f32 rounding of s - 10000, half an
  // ulp of 10000 = 4.9e-4 per score); -FLT_MAX rounds every score to
  // -FLT_MAX, and the row is the mean of V, or NaN.
  for (int j = 0; j < 7; ++j) pad.key_padding[7 + j] = 0;
  got = run_mha(p, pad, 1);
  Problem unpadded = p;
  unpadded.bias = [](int, int, int, int) { return 0.0; };
  Problem flat = p;
  flat.bias = [](int b, int, int, int) { return b == 1 ? 1.0 : -kInf; };
  flat.scale = 0;
  auto batch1 = [](std::vector<double> x) {
    return std::vector<double>(x.begin() + x.size() / 2, x.end());
  };
  probe("MultiHeadAttention default fill, batch 1 all padded", batch1(got), 2e-3,
        {{"unpadded", batch1(as_bshd(unpadded))}, {"mean of V", batch1(as_bshd(flat))}});
  for (bool causal : {false, true}) {
    MhaCase hard = pad;
    hard.unidirectional = causal;
    hard.set_fill = true, hard.mask_filter_value = -std::numeric_limits<float>::max();
    Problem q = causal ? s : p;  // s: tq = tk = 6
    if (causal) hard.key_padding.assign(2 * 6, 1);
    if (causal) std::fill(hard.key_padding.begin() + 6, hard.key_padding.end(), 0);
    got = run_mha(q, hard, 1);
    std::size_t nans =
        std::count_if(got.begin(), got.end(), [](double x) { return std::isnan(x); });
    std::printf(
        "probe MultiHeadAttention mask_filter_value -FLT_MAX%s, batch 1 all padded: %zu of "
        "%zu outputs NaN\n",
        causal ? " + unidirectional" : "", nans, got.size());
    if (!causal) {
      probe("  ... batch 1 reads", batch1(got), 1e-4, {{"mean of V", batch1(as_bshd(flat))}});
    }
  }
  // unidirectional with tk > tq and no past: which alignment, if any.
  Problem r = random_problem(rng, 1, 2, 2, 3, 7, 8, false);
  got = run_mha(r, MhaCase{true, {}, false, 0}, 1);
  r.bias = causal_bias(3, 7, false);
  std::vector<double> top_left = as_bshd(r);
  r.bias = causal_bias(3, 7, true);
  probe("MultiHeadAttention unidirectional, tq 3 < tk 7, no past", got, 1e-4,
        {{"top_left", top_left}, {"bottom_right", as_bshd(r)}});
}

// ---- com.microsoft.GroupQueryAttention: 3-D query / key / value of the new
// tokens, past K/V in [B, Hkv, P, D], seqlens_k = total - 1 ----

struct GqaCase {
  bool f16 = false;
  int past = 0;  ///< keys passed as past_key / past_value; the rest are new
  int local_window_size = -1;
};

std::vector<double> run_gqa(const Problem& p, const GqaCase& c, int threads) {
  int fresh = p.tk - c.past;
  std::vector<double> k_new = key_slice(p.k, p.batch, p.kv_heads, p.tk, p.dk, c.past, p.tk);
  std::vector<double> v_new = key_slice(p.v, p.batch, p.kv_heads, p.tk, p.dv, c.past, p.tk);
  std::vector<Tensor> in{float_tensor("query", c.f16, {p.batch, p.tq, p.heads * p.dk},
                                      bnsd_to_bsnd(p.q, p.batch, p.heads, p.tq, p.dk)),
                         float_tensor("key", c.f16, {p.batch, fresh, p.kv_heads * p.dk},
                                      bnsd_to_bsnd(k_new, p.batch, p.kv_heads, fresh, p.dk)),
                         float_tensor("value", c.f16, {p.batch, fresh, p.kv_heads * p.dv},
                                      bnsd_to_bsnd(v_new, p.batch, p.kv_heads, fresh, p.dv))};
  OnnxModel m;
  m.node.op_type = "GroupQueryAttention";
  m.node.domain = "com.microsoft";
  m.node.inputs = {"query", "key", "value", "", ""};
  if (c.past > 0) {
    in.push_back(float_tensor("past_key", c.f16, {p.batch, p.kv_heads, c.past, p.dk},
                              key_slice(p.k, p.batch, p.kv_heads, p.tk, p.dk, 0, c.past)));
    in.push_back(float_tensor("past_value", c.f16, {p.batch, p.kv_heads, c.past, p.dv},
                              key_slice(p.v, p.batch, p.kv_heads, p.tk, p.dv, 0, c.past)));
    m.node.inputs[3] = "past_key", m.node.inputs[4] = "past_value";
  }
  in.push_back(make_tensor("seqlens_k", ort::kOnnxInt32, {p.batch},
                           std::vector<std::int32_t>(p.batch, p.tk - 1)));
  in.push_back(
      make_tensor("total_sequence_length", ort::kOnnxInt32, {}, std::vector<std::int32_t>{p.tk}));
  m.node.inputs.insert(m.node.inputs.end(), {"seqlens_k", "total_sequence_length"});
  for (const Tensor& t : in) m.inputs.push_back(info_of(t));
  int type = c.f16 ? ort::kOnnxFloat16 : ort::kOnnxFloat;
  std::vector<std::int64_t> out_shape{p.batch, p.tq, p.heads * p.dv};
  m.node.outputs = {"output", "present_key", "present_value"};
  m.outputs.push_back({"output", type, {}});
  for (std::int64_t d : out_shape) m.outputs.back().dims.push_back({d, ""});
  for (const char* name : {"present_key", "present_value"}) {
    m.outputs.push_back({name, type, {{p.batch, ""}, {p.kv_heads, ""}, {0, "T"}, {p.dk, ""}}});
  }
  m.node.attributes = {OnnxAttribute::of_int("num_heads", p.heads),
                       OnnxAttribute::of_int("kv_num_heads", p.kv_heads),
                       OnnxAttribute::of_float("scale", static_cast<float>(p.scale)),
                       OnnxAttribute::of_float("softcap", static_cast<float>(p.softcap)),
                       OnnxAttribute::of_int("local_window_size", c.local_window_size)};
  return run_model(m, in, "output", out_shape, threads);
}

void gqa_cases(std::mt19937& rng) {
  auto as_bshd = [](const Problem& p) {
    return bnsd_to_bsnd(reference(p), p.batch, p.heads, p.tq, p.dv);
  };
  for (bool f16 : {false, true}) {
    double tol = f16 ? 1e-2 : 1e-4;
    std::string dt = f16 ? "f16" : "f32";
    Problem p = random_problem(rng, 2, 4, 2, 5, 5, 8, f16);
    p.bias = causal_bias(5, 5, true);
    check("GroupQueryAttention " + dt + " no past (causal)", as_bshd(p), tol, [&](int t) {
      return run_gqa(p, GqaCase{f16, 0, -1}, t);
    });
    // Past with more than one new token needs batch 1 (ORT refuses
    // otherwise); decoding one token takes any batch.
    Problem d = random_problem(rng, 1, 4, 2, 2, 5, 16, f16);
    d.bias = causal_bias(2, 5, true);
    d.scale = 0.2, d.softcap = 4;
    check("GroupQueryAttention " + dt + " 3 past + 2 new, dk 16, softcap 4", as_bshd(d), tol,
          [&](int t) {
            return run_gqa(d, GqaCase{f16, 3, -1}, t);
          });
    Problem one = random_problem(rng, 2, 4, 2, 1, 6, 8, f16);
    check("GroupQueryAttention " + dt + " batch 2, 5 past + 1 new", as_bshd(one), tol, [&](int t) {
      return run_gqa(one, GqaCase{f16, 5, -1}, t);
    });
    Problem many = random_problem(rng, 2, 4, 2, 2, 5, 8, f16);
    std::printf("probe GroupQueryAttention batch 2, 3 past + 2 new:\n");
    std::printf("  -> %s\n", run_gqa(many, GqaCase{f16, 3, -1}, 1).empty() ? "refused" : "ran");
  }
  // How many keys local_window_size = 2 keeps: 2, or 2 + 1.
  Problem w = random_problem(rng, 1, 2, 1, 6, 6, 8, false);
  std::vector<double> got = run_gqa(w, GqaCase{false, 0, 2}, 1);
  w.bias = causal_bias(6, 6, true, 2);
  std::vector<double> exact = as_bshd(w);
  w.bias = causal_bias(6, 6, true, 3);
  if (probe("GroupQueryAttention local_window_size 2", got, 1e-4,
            {{"2 keys", exact}, {"3 keys", as_bshd(w)}}) != "2 keys") {
    ++g_failures;
  }
  w.bias = causal_bias(6, 6, true, 2);
  check("GroupQueryAttention f32 local_window_size 2", exact, 1e-4, [&](int t) {
    return run_gqa(w, GqaCase{false, 0, 2}, t);
  });
  Problem odd = random_problem(rng, 1, 2, 1, 3, 3, 4, false);
  std::printf("probe GroupQueryAttention dk 4 (not a multiple of 8):\n");
  got = run_gqa(odd, GqaCase{}, 1);
  std::printf("  -> %s\n", got.empty() ? "refused" : "ran");
}

// slot 130 is AddSessionConfigEntry: a session told its model is in the
// ORT format refuses ONNX bytes; one told ONNX loads them.
void check_config_entry_slot() {
  std::mt19937 rng(7);
  Problem p = random_problem(rng, 1, 1, 1, 2, 2, 8, false);
  bool loads[2];
  const char* formats[2] = {"ORT", "ONNX"};
  for (int f = 0; f < 2; ++f) {
    ort::OrtSessionOptions* options = session_options(1);
    loads[f] = options &&
               ok(g_api->AddSessionConfigEntry(options, "session.load_model_format", formats[f]),
                  "AddSessionConfigEntry");
    std::printf("  session.load_model_format = %s:\n", formats[f]);
    std::vector<double> out =
        loads[f] ? run_attention(p, AttentionCase{}, 1, options) : std::vector<double>{};
    loads[f] = !out.empty();
    if (options) g_api->ReleaseSessionOptions(options);
  }
  bool pass = !loads[0] && loads[1];
  std::printf("%-4s AddSessionConfigEntry (slot 130) takes effect: ORT format %s, ONNX %s\n",
              pass ? "ok" : "FAIL", loads[0] ? "loaded" : "refused",
              loads[1] ? "loaded" : "refused");
  if (!pass) ++g_failures;
}

// A library that is not ONNX Runtime, or none, is refused in one line.
void check_refusals() {
  for (const char* path : {"libm.so.6", "/nonexistent/libonnxruntime.so.1"}) {
    std::string error;
    bool refused = ort::load_onnxruntime(path, error) == nullptr && !error.empty();
    std::printf("%-4s refuses %s: %s\n", refused ? "ok" : "FAIL", path, error.c_str());
    if (!refused) ++g_failures;
  }
}

// kOrtApiVersion is the newest table the library serves: GetApi of the
// next version is refused (ONNX Runtime prints one line saying so).
void check_api_version(const std::string& path) {
  using GetApiBase = const ort::OrtApiBase* (*)() noexcept;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  auto base = reinterpret_cast<GetApiBase>(dlsym(handle, "OrtGetApiBase"))();
  bool newest = base->GetApi(ort::kOrtApiVersion) != nullptr &&
                base->GetApi(ort::kOrtApiVersion + 1) == nullptr;
  std::printf("%-4s API version %u is the library's newest\n", newest ? "ok" : "FAIL",
              ort::kOrtApiVersion);
  if (!newest) ++g_failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : ".cache/onnxruntime/libonnxruntime.so.1";
  std::string error;
  std::unique_ptr<ort::OrtRuntime> runtime = ort::load_onnxruntime(path, error);
  if (!runtime) {
    std::fprintf(stderr, "ort_smoke: %s\n", error.c_str());
    return 2;
  }
  g_api = runtime->api;
  std::printf("ONNX Runtime %s from %s\n", runtime->version.c_str(), runtime->path.c_str());
  if (!ok(g_api->CreateEnv(ort::kOrtLoggingLevelError, "attncheck", &g_env), "CreateEnv")) return 2;
  check_refusals();
  check_api_version(path);
  check_config_entry_slot();
  std::mt19937 rng(20260101);
  attention_cases(rng);
  mha_cases(rng);
  gqa_cases(rng);
  g_api->ReleaseEnv(g_env);
  std::printf("%d failure(s)\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
