// The LibTorch adapters (impls/torch/): what they declare, that they agree
// with the loop references on fixed problems, what LibTorch 1.13 does where
// the adapters translate (mask polarity, causal with a mask, MHA's attn_mask),
// and the findings of the property suite as what torch does today: NaN for
// a query with no allowed key, listed in fixtures/expected-failures.json.
// In bf16 and Half: what LibTorch 1.13's CPU code computes in those formats
// (each finding behind torch_sdpa_bf16's declaration, torch_common.h), and
// that Half has no CPU kernels, so torch_sdpa_f16 is not registered.

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/activation.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/gen/generators.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "attncheck/fixture.h"
#include "impls/impl_common.h"
#include "impls/torch/torch_common.h"

namespace attncheck {
namespace {

const std::vector<std::string> kAdapters = {"torch_mha_f32", "torch_sdpa_f32", "torch_sdpa_f64"};

std::shared_ptr<const Implementation> impl(const std::string& name) {
  auto found = find_impl(name);
  if (!found) throw std::runtime_error("not registered: " + name);
  return found;
}

// The 16-bit adapters LibTorch 1.13 computes on the CPU (no Half: see
// LibTorch113.HalfHasNoCpuMatmulNorSoftmax).
const std::vector<std::string> k16BitAdapters = {"torch_sdpa_bf16"};

DType dtype_of(const std::string& adapter) {
  if (adapter.ends_with("bf16")) return DType::bf16;
  if (adapter.ends_with("f16")) return DType::f16;
  return adapter.ends_with("f64") ? DType::f64 : DType::f32;
}

std::string reference_for(DType d) { return d == DType::f64 ? "loop_f64" : "loop_f32"; }

// A problem of small exact values (multiples of 1/8 in [-2, 2]) from a fixed
// LCG: the same on every run and representable in f32.
Problem make_problem(DType d, int64_t batch, int64_t heads, int64_t tq, int64_t tk, int64_t dk,
                     uint64_t seed) {
  Problem p = Problem::zeros(d, batch, heads, heads, tq, tk, dk, dk);
  uint64_t state = seed;
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(static_cast<int64_t>((state >> 33) % 33) - 16) / 8.0;
  };
  for (Tensor* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = next();
  return p;
}

// A mask the same for every batch entry and head (as torch_mha_f32 takes
// it) that leaves every query at least one key.
Broadcast<uint8_t> shared_mask(int64_t tq, int64_t tk) {
  Broadcast<uint8_t> m;
  m.data.resize(static_cast<size_t>(tq * tk));
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j) m.data[static_cast<size_t>(i * tk + j)] = (i + 2 * j) % 3 != 1;
  return m;
}

// Largest |a - b| over two arrays of one size.
double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Agreement with the loop reference of the same dtype: values of size 2 at
// most, so a few hundred units of roundoff are far below these bounds, and a
// wrong mask or axis is far above them.
void expect_matches_reference(const std::string& adapter, const Problem& p,
                              const std::string& what) {
  SCOPED_TRACE(adapter + ": " + what);
  const ForwardResult got = impl(adapter)->forward(p);
  const ForwardResult want = impl(reference_for(p.dtype))->forward(p);
  ASSERT_EQ(got.status, Status::ok) << got.error;
  ASSERT_EQ(want.status, Status::ok) << want.error;
  const double tolerance = p.dtype == DType::f64 ? 1e-13 : 1e-5;
  EXPECT_LE(max_difference(got.out, want.out), tolerance);
  EXPECT_LE(max_difference(got.weights, want.weights), tolerance);
}

TEST(TorchAdapters, MhaRealSizeShapesKeepTheIdentityProjectionsAffordable) {
  // torch_mha_f32's identity projections cost 2 (tq + 2 tk) E^2 + 2 tq E^2
  // flops per batch entry (E = heads * dk; torch_mha.cpp). Before its limits
  // a thorough shape needed 6e11 and was killed as a hang (10 s of CPU).
  // Every real-size shape, fixed or random, fitted to the adapter's
  // declaration, must stay within 1.4e11 (a few seconds at the tens of
  // GFLOP/s OpenBLAS reaches on one core here).
  const auto mha = impl("torch_mha_f32");
  double worst = 0;
  for (Profile profile : {Profile::ci, Profile::thorough}) {
    const gen::GenSpec spec = gen::spec_for(mha->info(), DType::f32, profile);
    std::vector<gen::SizeShape> shapes = gen::fixed_real_shapes(profile);
    for (uint64_t seed = 0; seed < 2000; ++seed) shapes.push_back(gen::random_real_shape(profile, seed));
    for (const gen::SizeShape& s : shapes) {
      const gen::SizeShape f = gen::fit_shape(s, spec, gen::size_cost_cap(profile),
                                              gen::reference_weight(mha->info()));
      const double e = static_cast<double>(f.heads * f.dk);
      worst = std::max(worst, static_cast<double>(f.batch) * (2.0 * (f.tq + 2 * f.tk) + 2.0 * f.tq) * e * e);
    }
  }
  std::cout << "largest projection cost of a fitted real-size shape: " << worst << " flops\n";
  EXPECT_LE(worst, 1.4e11);
  EXPECT_GT(worst, 1e9);  // real sizes do reach the adapter
}

TEST(TorchAdapters, AreRegisteredAsAdaptersWithWhatTorchSupports) {
  const Features sdpa = ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK |
                        ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT |
                        ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_WEIGHTS;
  const Features mha =
      ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_WEIGHTS;
  for (const std::string& name : kAdapters) {
    SCOPED_TRACE(name);
    const ImplInfo& info = impl(name)->info();
    EXPECT_EQ(info.kind, Kind::adapter);
    EXPECT_EQ(info.dtypes, dtype_bit(dtype_of(name)));
    EXPECT_EQ(info.features, name.starts_with("torch_sdpa") ? sdpa : mha);
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_SCALE));  // torch takes no scale in 1.13
    EXPECT_EQ(info.limits.dv_equals_dk, name == "torch_mha_f32");
  }
  {  // bf16: torch's CPU arithmetic in that format (TorchBf16, LibTorch113 below)
    const ImplInfo& info = impl("torch_sdpa_bf16")->info();
    EXPECT_EQ(info.kind, Kind::adapter);
    EXPECT_EQ(info.dtypes, dtype_bit(DType::bf16));
    EXPECT_EQ(info.features, impl("torch_sdpa_f32")->info().features);
    EXPECT_EQ(info.empty_rows, EmptyRowPolicy::zero);
    // The matmuls accumulate in bf16, S is their bf16 result and P is
    // stored in bf16 (LibTorch113.Bf16ArithmeticOnTheCpu): one format.
    EXPECT_EQ(info.precision.accum, DType::bf16);
    EXPECT_EQ(info.precision.s_cast_format(), DType::bf16);
    EXPECT_EQ(info.precision.p_cast, DType::bf16);
    EXPECT_EQ(info.precision.exp_ulps, 1u);
    EXPECT_EQ(info.precision.key_block, 0);
    EXPECT_FALSE(info.precision.flush_to_zero);
  }
}

TEST(TorchAdapters, MatchTheLoopReferencesOnFixedProblems) {
  for (const std::string& name : kAdapters) {
    const DType d = dtype_of(name);
    const bool sdpa = name.starts_with("torch_sdpa");
    expect_matches_reference(name, make_problem(d, 2, 3, 4, 5, 4, 1), "plain, tq != tk");
    expect_matches_reference(name, make_problem(d, 1, 1, 1, 7, 1, 2), "one query, dk = 1");

    Problem padded = make_problem(d, 2, 2, 3, 6, 2, 3);
    padded.key_valid = {1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0};
    expect_matches_reference(name, padded, "key padding");

    Problem masked = make_problem(d, 2, 2, 4, 5, 3, 4);
    masked.mask = shared_mask(4, 5);
    masked.key_valid = {1, 1, 1, 1, 0, 0, 1, 1, 1, 1};
    expect_matches_reference(name, masked, "mask and key padding");
    if (!sdpa) continue;

    Problem per_head = make_problem(d, 2, 3, 3, 4, 2, 5);
    per_head.mask = Broadcast<uint8_t>{2, 3, {}};
    for (size_t e = 0; e < 2 * 3 * 3 * 4; ++e) per_head.mask->data.push_back(e % 5 != 2);
    expect_matches_reference(name, per_head, "a mask per batch entry and head");

    for (auto [tq, tk] : {std::pair<int64_t, int64_t>{4, 4}, {3, 6}, {5, 3}}) {
      Problem causal = make_problem(d, 1, 2, tq, tk, 3, 6);
      causal.causal = true;
      expect_matches_reference(name, causal, "causal, top-left, tq " + std::to_string(tq) +
                                                 " tk " + std::to_string(tk));
    }

    // The problem's strides reach torch: a padded BTHD layout (gaps of NaN)
    // gives the contiguous answer.
    Problem strided = make_problem(d, 2, 2, 3, 4, 2, 7);
    const Problem contiguous = strided;
    const auto relayout = [](Tensor& t, int64_t b, int64_t h, int64_t s, int64_t dd) {
      Tensor out;
      out.strides = {s * h * (dd + 1), dd + 1, h * (dd + 1), 1};
      out.data.assign(static_cast<size_t>(b * s * h * (dd + 1)),
                      std::numeric_limits<double>::quiet_NaN());
      for (int64_t i0 = 0; i0 < b; ++i0)
        for (int64_t i1 = 0; i1 < h; ++i1)
          for (int64_t i2 = 0; i2 < s; ++i2)
            for (int64_t i3 = 0; i3 < dd; ++i3) out.at(i0, i1, i2, i3) = t.at(i0, i1, i2, i3);
      t = std::move(out);
    };
    relayout(strided.q, 2, 2, 3, 2);
    relayout(strided.k, 2, 2, 4, 2);
    relayout(strided.v, 2, 2, 4, 2);
    strided.validate();
    const ForwardResult a = impl(name)->forward(strided), b = impl(name)->forward(contiguous);
    ASSERT_EQ(a.status, Status::ok) << a.error;
    EXPECT_EQ(a.out, b.out);
  }
}

// torch's is_causal takes no attn_mask (LibTorch113 below), so causal with
// key padding or a mask goes in as one bool mask with the lower triangle
// AND-ed in, as a torch user writes it; bottom-right with tq != tk is not
// declared and stays UNSUPPORTED.
TEST(TorchAdapters, SdpaFoldsCausalIntoTheMaskWhenThereIsOne) {
  for (const std::string name : {"torch_sdpa_f64", "torch_sdpa_f32"}) {
    for (auto [tq, tk] : {std::pair<int64_t, int64_t>{3, 3}, {2, 3}, {4, 3}}) {
      Problem p = make_problem(dtype_of(name), 1, 1, tq, tk, 2, 8);
      p.causal = true;
      p.key_valid = {1, 1, 0};
      expect_matches_reference(name, p, "causal with key padding, tq " + std::to_string(tq));
      p.key_valid.clear();
      p.mask = shared_mask(tq, tk);
      for (int64_t i = 0; i < tq; ++i) p.mask->at(0, 0, i, 0, tq, tk) = 1;  // no empty row
      expect_matches_reference(name, p, "causal with a mask, tq " + std::to_string(tq));
    }
    Problem p = make_problem(dtype_of(name), 1, 1, 2, 3, 2, 8);
    p.causal = true;
    p.align = Align::bottom_right;
    EXPECT_EQ(impl(name)->forward(p).status, Status::unsupported) << name;
  }
}

// What LibTorch 1.13 itself does, where the adapters translate.
TEST(LibTorch113, SdpaBoolMaskTrueMeansTheKeyTakesPart) {
  const at::Tensor q = at::ones({1, 1, 1, 1}, at::kDouble);
  const at::Tensor k = at::zeros({1, 1, 3, 1}, at::kDouble);
  const at::Tensor v = at::arange(3, at::kDouble).view({1, 1, 3, 1});
  const at::Tensor mask = at::tensor({1, 0, 1}, at::kInt).to(at::kBool).view({1, 1, 1, 3});
  const auto [out, weights] = at::_scaled_dot_product_attention(q, k, v, mask, 0.0, true, false);
  EXPECT_TRUE(at::equal(weights.view({3}), at::tensor({0.5, 0.0, 0.5}, at::kDouble)));
  EXPECT_EQ(out.item<double>(), 1.0);
}

TEST(LibTorch113, SdpaRefusesIsCausalWithAnAttnMask) {
  const at::Tensor x = at::ones({1, 1, 2, 1}, at::kDouble);
  const at::Tensor mask = at::ones({1, 1, 2, 2}, at::kBool);
  try {
    at::_scaled_dot_product_attention(x, x, x, mask, 0.0, false, true);
    FAIL() << "torch accepted is_causal with an attn_mask";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Explicit attn_mask should not be set when is_causal=True"),
              std::string::npos);
  }
}

TEST(LibTorch113, MhaAddsABoolAttnMaskInsteadOfMaskingWithIt) {
  namespace F = torch::nn::functional;
  const at::Tensor eye = at::eye(1, at::kFloat);
  const auto options =
      F::MultiheadAttentionForwardFuncOptions(1, 1, at::cat({eye, eye, eye}),
                                              at::zeros({3}, at::kFloat), {}, {}, false, 0.0,
                                              eye, at::zeros({1}, at::kFloat))
          .training(false)
          .average_attn_weights(false);
  const at::Tensor q = at::ones({1, 1, 1}, at::kFloat);  // [tq][B][E]
  const at::Tensor kv = at::zeros({2, 1, 1}, at::kFloat);
  const at::Tensor bool_mask = at::tensor({0, 1}, at::kInt).to(at::kBool).view({1, 2});
  const at::Tensor plus_one = at::tensor({0.0f, 1.0f}, at::kFloat).view({1, 2});
  const auto with_bool = std::get<1>(
      F::multi_head_attention_forward(q, kv, kv, F::MultiheadAttentionForwardFuncOptions(options).attn_mask(bool_mask)));
  const auto with_plus_one = std::get<1>(
      F::multi_head_attention_forward(q, kv, kv, F::MultiheadAttentionForwardFuncOptions(options).attn_mask(plus_one)));
  // Python documents true as "not allowed"; the C++ function adds it as 1.
  EXPECT_GT(with_bool[0][0][0][1].item<float>(), 0.5f);
  EXPECT_TRUE(at::equal(with_bool, with_plus_one));
  // A per-head [B*H][tq][tk] mask does not broadcast after its unsqueeze(0).
  EXPECT_THROW(F::multi_head_attention_forward(
                   q, kv, kv,
                   F::MultiheadAttentionForwardFuncOptions(options).attn_mask(
                       at::zeros({1, 1, 2}, at::kFloat))),
               c10::Error);
}

// What LibTorch 1.13 computes in bf16 on the CPU: the findings behind
// torch_sdpa_bf16's declaration (torch_common.h, adapter_info).
at::Tensor bf16(std::vector<float> values, at::IntArrayRef shape) {
  return at::tensor(values, at::kFloat).view(shape).to(at::kBFloat16);
}

TEST(LibTorch113, Bf16ArithmeticOnTheCpu) {
  {
    SCOPED_TRACE("the chain");
    // Bit for bit the composite chain, each tensor bf16: the query scaled
    // first (q * (1 / sqrt(dk)), not the product), S the matmul's bf16
    // result, softmax, P V. Shapes on both sides of bmm's 400 threshold.
    at::manual_seed(17);
    for (auto [tq, tk, dk] : {std::array<int64_t, 3>{3, 7, 2}, {3, 7, 5}, {9, 40, 33}}) {
      SCOPED_TRACE(dk);
      const at::Tensor q = (at::randn({2, 2, tq, dk}) * 3).to(at::kBFloat16);
      const at::Tensor k = (at::randn({2, 2, tk, dk}) * 3).to(at::kBFloat16);
      const at::Tensor v = at::randn({2, 2, tk, dk}).to(at::kBFloat16);
      const auto [out, weights] =
          at::_scaled_dot_product_attention(q, k, v, {}, 0.0, true, false);
      const at::Tensor s = at::matmul(q * (1.0 / std::sqrt(static_cast<double>(dk))),
                                      k.transpose(-2, -1));
      EXPECT_EQ(s.scalar_type(), at::kBFloat16);
      const at::Tensor p = at::softmax(s, -1);
      EXPECT_TRUE(at::equal(weights, p));
      EXPECT_TRUE(at::equal(out, at::matmul(p, v)));
    }
  }
  {
    SCOPED_TRACE("matmul");
    // 1 + 2^-8 + 2^-8: summed in bf16 each 2^-8 is a tie that rounds back
    // to 1 (even); summed in float it is 1 + 2^-7, which bf16 holds.
    const float e = std::ldexp(1.0f, -8);
    const at::Tensor row = bf16({1, e, e}, {1, 1, 3});
    const at::Tensor ones = at::ones({1, 1, 3}, at::kBFloat16);
    // tq tk dk = 3 < 400: baddbmm_cpu_kernel, every product and sum in bf16.
    EXPECT_EQ(at::matmul(row, ones.transpose(-2, -1)).item<float>(), 1.0f);
    // 12 x 12 x 3 = 432: cpublas::gemm with B = K^T transposed sums in float.
    const at::Tensor q = row.expand({1, 12, 3}).contiguous();
    const at::Tensor k = ones.expand({1, 12, 3}).contiguous();
    EXPECT_EQ(at::matmul(q, k.transpose(-2, -1))[0][0][0].item<float>(), 1.0f + 2 * e);
    // P V with a row-major V of 3 x 150 (450): key by key into a bf16 result.
    EXPECT_EQ(at::matmul(row, at::ones({1, 3, 150}, at::kBFloat16))[0][0][0].item<float>(),
              1.0f);
    // The same V column-major sums in float.
    EXPECT_EQ(at::matmul(row, at::ones({1, 150, 3}, at::kBFloat16).transpose(1, 2))[0][0][0]
                  .item<float>(),
              1.0f + 2 * e);
  }
  {
    SCOPED_TRACE("softmax");
    // 300 equal scores: a bf16 running sum stalls at 256 (256 + 1 is a tie
    // that rounds to 256), giving 1/256; torch sums in float: bf16(1/300).
    const at::Tensor p = at::softmax(at::zeros({300}, at::kBFloat16), -1);
    EXPECT_EQ(p.scalar_type(), at::kBFloat16);
    EXPECT_EQ(p[0].item<float>(), at::tensor({1.0f / 300}).to(at::kBFloat16).item<float>());
    EXPECT_NE(p[0].item<float>(), 1.0f / 256);
  }
}

TEST(TorchBf16, BfloatAccumulationIsNeededForTheScoresTorchComputes) {
  // One query, dk = 16 (scale 1/4 exact), q = 4 (q * scale = 1): key 0's
  // products are 1, fourteen of 2^-8, then -1. Torch's small bmm sums them
  // in bf16: each 2^-8 is a tie back to 1, so the score is 0 instead of
  // 14 * 2^-8 (a logit error of 0.055 with |t| that small). With values
  // 1 and -1 the output is off by about 0.027. Declared as torch computes
  // (bf16 accumulation: gamma_18 times sum |q k|) the case passes (budget
  // used 0.19); declared as eager code computes (float accumulation, S
  // stored in bf16: eager_bf16's traits) the same answer fails
  // MatchesOracle: the stored score's error 3 u_s |t| does not cover a
  // cancelling bf16 sum.
  Fixture f;
  f.problem = Problem::zeros(DType::bf16, 1, 1, 1, 1, 2, 16, 1);
  for (int64_t t = 0; t < 16; ++t) f.problem.q.at(0, 0, 0, t) = 4;
  f.problem.k.at(0, 0, 0, 0) = 1;
  for (int64_t t = 1; t < 15; ++t) f.problem.k.at(0, 0, 0, t) = std::ldexp(1.0, -8);
  f.problem.k.at(0, 0, 0, 15) = -1;
  f.problem.v.at(0, 0, 0, 0) = 1;
  f.problem.v.at(0, 0, 1, 0) = -1;
  f.meta.property = "MatchesOracle";
  f.meta.impl = "torch_sdpa_bf16";
  const auto adapter = impl("torch_sdpa_bf16");
  const ForwardResult r = adapter->forward(f.problem);
  ASSERT_EQ(r.status, Status::ok);
  EXPECT_EQ(r.out[0], 0.0);  // both scores 0: equal weights
  const RunConfig config;
  const PropertyOutcome honest = replay_fixture(f, *adapter, config);
  EXPECT_EQ(honest.status, PropertyStatus::passed) << honest.message;
  ImplInfo eager_like = adapter->info();
  eager_like.precision.accum = DType::f32;
  eager_like.precision.s_cast = DType::bf16;
  // Every stage in float (the adapter declares its sums by stage).
  eager_like.precision.score_accum.reset();
  eager_like.precision.softmax_accum.reset();
  eager_like.precision.pv_accum.reset();
  const impls::FunctionImpl lying(eager_like,
                                  [&](const Problem& p) { return adapter->forward(p); });
  const PropertyOutcome caught = replay_fixture(f, lying, config);
  EXPECT_EQ(caught.status, PropertyStatus::failed) << caught.message;
}

// The shrunk counterexample: q = 0 (506 equal weights), v near 1; exact
// 0.944, torch 0.613, the plain algorithm in the declared formats 0.945.
// Recomputed here with at::matmul alone, and replayed through the adapter.
// LibTorch-2 (docs/implementations.md): a bf16 product goes to oneDNN
// (float accumulation) only with AVX512BW/VL/DQ and batch x m x n x k over
// 16^3; the fixture's (2 x 1 x 1 x 506) takes the fallback GEMM on every CPU.
// Whether this CPU has AMX with bf16 (the Linux flag amx_bf16).
bool cpu_has_amx_bf16() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" amx_bf16 ") != std::string::npos;
  return false;
}

// at::bmm of bf16 ones, [1 x m x k] by [1 x k x n], in a forked child: the
// signal that ended it, 0 when it returned.
int bf16_bmm_in_child(int64_t m, int64_t k, int64_t n) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    at::set_num_threads(1);
    const at::Tensor a = at::ones({1, m, k}, at::kBFloat16), b = at::ones({1, k, n}, at::kBFloat16);
    const double sum = at::bmm(a, b).to(at::kDouble).sum().item<double>();
    _exit(sum == static_cast<double>(m * n * k) ? 0 : 3);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : (WEXITSTATUS(status) == 0 ? 0 : -1);
}

// LibTorch-3 (docs/implementations.md): on a CPU with AMX, LibTorch 1.13's
// oneDNN 2.6.3 runs a bf16 product of one row, 63 keys and 80 columns
// (brg:avx512_core_amx_bf16) into SIGILL, where 64 keys, 79 or 81 columns,
// or AMX turned off (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16) compute it.
// Found by the thorough profile's BatchHeadIndependence on torch_sdpa_bf16
// (fixtures/torch/amx-bf16-bmm-sigill.json: tq 1, tk 63, dv 80); without
// AMX every one of these products returns.
TEST(LibTorch113, Bf16ProductOf63KeysAnd80ColumnsDiesOnAmx) {
  EXPECT_EQ(bf16_bmm_in_child(1, 64, 80), 0);
  EXPECT_EQ(bf16_bmm_in_child(1, 63, 79), 0);
  EXPECT_EQ(bf16_bmm_in_child(1, 63, 80), cpu_has_amx_bf16() ? SIGILL : 0)
      << (cpu_has_amx_bf16() ? "AMX: the finding is gone (update docs/implementations.md)"
                             : "no AMX here, and still a crash");
}

TEST(LibTorch113, SmallBf16ProductsAccumulateInBf16AndStagnate) {
  const Fixture f = load_fixture(std::string(ATTNCHECK_SOURCE_DIR) +
                                 "/fixtures/torch/bf16-matmul-fallback-accumulator.json");
  __builtin_cpu_init();
  const bool onednn = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  const Problem& p = f.problem;
  ASSERT_EQ(p.dv, 1);
  ASSERT_LE(p.batch * p.heads * p.tq * p.tk * p.dv, 16 * 16 * 16);
  for (int64_t h = 0; h < p.heads; ++h) {
    SCOPED_TRACE("head " + std::to_string(h));
    std::vector<float> v;
    double exact = 0;
    for (int64_t j = 0; j < p.tk; ++j) {
      v.push_back(static_cast<float>(p.v.at(0, h, j, 0)));
      exact += p.v.at(0, h, j, 0);
    }
    exact /= static_cast<double>(p.tk);
    const at::Tensor vt = at::from_blob(v.data(), {p.tk, 1}, at::kFloat).to(at::kBFloat16);
    // One query row (decode): under 16^3, the bf16 sum stagnates anywhere.
    const at::Tensor w = at::full({1, p.tk}, 1.0 / static_cast<double>(p.tk)).to(at::kBFloat16);
    const double got = at::matmul(w, vt).to(at::kDouble).item<double>();
    EXPECT_LT(got, exact - 0.2) << "the bf16 sum no longer stagnates: the finding is gone";
    // Sixteen rows (16 x 506 > 16^3): oneDNN's float accumulation, where
    // the CPU has it.
    const at::Tensor w16 = at::full({16, p.tk}, 1.0 / static_cast<double>(p.tk)).to(at::kBFloat16);
    const double got16 = at::matmul(w16, vt)[0][0].to(at::kDouble).item<double>();
    if (onednn) {
      EXPECT_NEAR(got16, exact, 0.01);
    } else {
      EXPECT_LT(got16, exact - 0.2);
    }
  }
  const PropertyOutcome o = replay_fixture(f, *impl("torch_sdpa_bf16"), replay_config(f));
  EXPECT_EQ(o.status, PropertyStatus::failed) << o.message;
  EXPECT_NE(o.message.find("times the baseline's"), std::string::npos) << o.message;
}

TEST(LibTorch113, HalfHasNoCpuMatmulNorSoftmaxSoTorchSdpaF16IsNotRegistered) {
  using impls::torch_adapters::not_implemented_message;
  const at::Tensor x = at::ones({1, 1, 1, 1}, at::kHalf);
  // Each refusal as the adapter reads it: torch's first line.
  try {
    at::_scaled_dot_product_attention(x, x, x, {}, 0.0, true, false);
    FAIL() << "LibTorch computes SDPA in Half now: torch_sdpa_f16 is registered, check it "
              "(attncheck check --impl torch_sdpa_f16) and update docs/implementations.md's LibTorch section";
  } catch (const c10::Error& e) {
    EXPECT_EQ(not_implemented_message(e), "\"bmm\" not implemented for 'Half'");
  }
  try {
    at::softmax(x, -1);
    FAIL() << "LibTorch has a Half softmax on the CPU now";
  } catch (const c10::Error& e) {
    EXPECT_EQ(not_implemented_message(e),
              "\"softmax_lastdim_kernel_impl\" not implemented for 'Half'");
  }
  EXPECT_EQ(find_impl("torch_sdpa_f16"), nullptr);
  // Other refusals are not "not implemented": the adapters let them through.
  try {
    at::_scaled_dot_product_attention(x.to(at::kFloat), x.to(at::kFloat), x.to(at::kFloat),
                                      at::ones({1, 1, 1, 1}, at::kBool), 0.0, false, true);
    FAIL() << "torch accepted is_causal with an attn_mask";
  } catch (const c10::Error& e) {
    EXPECT_EQ(not_implemented_message(e), "");
  }
}

// The suite's finding: a query with no allowed key gets NaN from softmax
// over all -inf, in the output and in the weights, from every adapter.
TEST(TorchFindings, AQueryWithNoAllowedKeyGetsNaN) {
  std::vector<std::string> adapters = kAdapters;
  adapters.insert(adapters.end(), k16BitAdapters.begin(), k16BitAdapters.end());
  for (const std::string& name : adapters) {
    SCOPED_TRACE(name);
    Problem p = make_problem(dtype_of(name), 2, 1, 2, 3, 1, 9);
    p.key_valid = {0, 0, 0, 1, 1, 1};  // batch entry 0 sees no key
    const ForwardResult r = impl(name)->forward(p);
    ASSERT_EQ(r.status, Status::ok);
    for (int64_t i = 0; i < p.tq; ++i) {
      EXPECT_TRUE(std::isnan(r.out[out_index(p, 0, 0, i, 0)]));
      EXPECT_TRUE(std::isfinite(r.out[out_index(p, 1, 0, i, 0)]));
      for (int64_t j = 0; j < p.tk; ++j) EXPECT_TRUE(std::isnan(r.weights[weight_index(p, 0, 0, i, j)]));
    }
  }
}

// A fixture replayed in a forked child (the in-process adapter, no worker):
// the signal that ended the child, 0 when the replay returned.
int replay_in_child(const Fixture& fixture, const std::string& name) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    replay_fixture(fixture, *impl(name), replay_config(fixture));
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

ExpectedFailures expected_failures() {
  const std::string path = std::string(ATTNCHECK_SOURCE_DIR) + "/fixtures/expected-failures.json";
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& e : j.at("expected_failures")) {
    EXPECT_FALSE(e.value("reason", "").empty()) << e.dump();
  }
  // The entries that hold on this machine (an "unless_cpu_has" entry only
  // on a CPU that lacks a feature it names), as `check` reads them.
  return load_expected_failures(path);
}

// The whole catalog under the CI profile and seed, as `attncheck check`
// runs it with the project's list: nothing fails, every failure is xfail
// by a finding listed for that adapter (its cause explains the
// counterexample), every finding listed for a torch adapter on this
// machine is met (else `check` reports xpass by its fixture), and the
// causal checks pass for SDPA although its causal flag takes no mask.
TEST(TorchFindings, TheCatalogFailsExactlyTheListedExpectedFailures) {
  const ExpectedFailures listed = expected_failures();
  std::vector<std::string> adapters = kAdapters;
  adapters.insert(adapters.end(), k16BitAdapters.begin(), k16BitAdapters.end());
  for (const std::string& name : adapters) {
    std::set<std::string> met;
    for (const PropertyDef& prop : property_defs()) {
      SCOPED_TRACE(name + " " + prop.name);
      RunConfig config;
      config.seed = kDefaultSeed;
      config.known_findings = listed.findings_for(name, prop.name);
      const PropertyOutcome o = run_property(prop, *impl(name), dtype_of(name), config);
      EXPECT_NE(o.status, PropertyStatus::failed) << o.message;
      EXPECT_FALSE(listed.expects(name, prop.name)) << "the torch entries are by cause";
      if (o.status == PropertyStatus::xfail) {
        ASSERT_TRUE(o.expected.has_value()) << o.message;
        met.insert(o.expected->finding + " " + o.expected->cause);
      }
      // Causal with padding or a mask is folded into one bool mask: the
      // causal checks are answered, not refused.
      if (name.starts_with("torch_sdpa") && prop.name == "CausalPrefixIndependence") {
        EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
      }
      // Nothing gives up (a declared precision that leaves nothing to
      // judge is a skip with its reason), and no pass comes near its bound.
      EXPECT_EQ(o.message.find("gave up"), std::string::npos) << o.message;
      if (o.status == PropertyStatus::passed) {
        EXPECT_LT(o.max_budget_used, 1) << o.message;
      }
    }
    // A finding the catalog did not meet at this seed (LibTorch-2 on an
    // AVX-512 machine, whose larger products accumulate in float) still
    // holds: its fixture fails, so `check` reports no xpass.
    for (const ExpectedFinding& f : listed.findings) {
      if (!f.names(name) || met.count(f.finding.finding + " " + f.finding.cause)) continue;
      const Fixture fixture = load_fixture(f.finding.fixture);
      if (fixture.problem.dtype != dtype_of(name)) continue;
      // A death (LibTorch-3's SIGILL) is replayed in a child, which it ends.
      if (f.finding.cause == "illegal_instruction") {
        EXPECT_EQ(replay_in_child(fixture, name), SIGILL)
            << name << ": finding " << f.finding.finding << " no longer dies of SIGILL";
        continue;
      }
      EXPECT_EQ(replay_fixture(fixture, *impl(name), replay_config(fixture)).status,
                PropertyStatus::failed)
          << name << ": finding " << f.finding.finding << " (" << f.finding.cause
          << ") is listed, no property met it and its fixture passes";
    }
  }
  for (const ExpectedFinding& f : listed.findings) {
    for (const std::string& g : f.impls) {
      if (g.starts_with("torch_")) {
        EXPECT_NE(find_impl(g), nullptr) << g;
      }
    }
    if (f.property) {
      EXPECT_NE(find_property(*f.property), nullptr) << *f.property;
    }
  }
}

}  // namespace
}  // namespace attncheck
