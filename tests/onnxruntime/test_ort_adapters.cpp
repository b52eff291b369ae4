// The ONNX Runtime adapters (impls/onnxruntime/): what they declare, that
// they agree with the loop reference on fixed problems that take each
// translation (is_causal, the bool and float attn_mask, GroupQueryAttention's
// past keys and window), that what an op cannot compute is UNSUPPORTED with
// its reason, and the cheap properties through run_property with a small
// case budget. Registered only when ATTNCHECK_WITH_ONNXRUNTIME is on and the
// library was found (tests/CMakeLists.txt).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/properties.h"
#include "attncheck/registry.h"
#include "properties/property_def.h"
#include "run/run_property.h"

namespace attncheck {
namespace {

const std::vector<std::string> kAttention = {"ort_attention_f32", "ort_attention_f32_mt"};
const std::vector<std::string> kGqa = {"ort_gqa_f32", "ort_gqa_f32_mt"};

std::shared_ptr<const Implementation> impl(const std::string& name) {
  auto found = find_impl(name);
  if (!found) throw std::runtime_error("not registered: " + name);
  return found;
}

std::vector<std::string> all_adapters() {
  std::vector<std::string> v = kAttention;
  v.insert(v.end(), kGqa.begin(), kGqa.end());
  return v;
}

// A problem of small exact values (multiples of 1/8 in [-2, 2]) from a
// fixed LCG, representable in f32.
Problem make_problem(int64_t batch, int64_t heads, int64_t kv_heads, int64_t tq, int64_t tk,
                     int64_t d, uint64_t seed) {
  Problem p = Problem::zeros(DType::f32, batch, heads, kv_heads, tq, tk, d, d);
  p.scale = 0.25;
  uint64_t state = seed;
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(static_cast<int64_t>((state >> 33) % 33) - 16) / 8.0;
  };
  for (Tensor* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = next();
  return p;
}

// Agreement with loop_f32 within a bound far below a wrong mask or axis
// (values of size 2, a few ulps of f32 each).
void expect_matches_loop(const std::string& adapter, const Problem& p, const std::string& what) {
  SCOPED_TRACE(adapter + ": " + what);
  const ForwardResult got = impl(adapter)->forward(p);
  const ForwardResult want = impl("loop_f32")->forward(p);
  ASSERT_EQ(got.status, Status::ok) << got.error;
  ASSERT_EQ(want.status, Status::ok) << want.error;
  ASSERT_EQ(got.out.size(), want.out.size());
  double worst = 0;
  for (size_t i = 0; i < got.out.size(); ++i) worst = std::max(worst, std::abs(got.out[i] - want.out[i]));
  EXPECT_LE(worst, 1e-5);
}

TEST(OrtAdapters, AreRegisteredWithWhatEachOpComputes) {
  for (const std::string& name : all_adapters()) {
    SCOPED_TRACE(name);
    const ImplInfo& info = impl(name)->info();
    EXPECT_EQ(info.kind, Kind::adapter);
    EXPECT_EQ(info.dtypes, dtype_bit(DType::f32));
    EXPECT_EQ(info.threads, name.ends_with("_mt") ? 4u : 1u);
    // f32 throughout, one pass, exp_ulps covering MLAS's tanh (2.54 ulps).
    EXPECT_EQ(info.precision.accum, DType::f32);
    EXPECT_EQ(info.precision.p_cast, DType::f32);
    EXPECT_EQ(info.precision.exp_ulps, 3u);
    EXPECT_EQ(info.precision.key_block, 0);
    EXPECT_FALSE(info.precision.flush_to_zero);
    EXPECT_TRUE(info.has(ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_GQA |
                         ATTNCHECK_FEATURE_SOFTCAP | ATTNCHECK_FEATURE_SCALE |
                         ATTNCHECK_FEATURE_WINDOW));
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_WEIGHTS));
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_LSE));
  }
  for (const std::string& name : kAttention) {
    const ImplInfo& info = impl(name)->info();
    EXPECT_TRUE(info.has(ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK |
                         ATTNCHECK_FEATURE_BIAS));
    EXPECT_EQ(info.empty_rows, EmptyRowPolicy::zero);
  }
  for (const std::string& name : kGqa) {
    const ImplInfo& info = impl(name)->info();
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_KEY_VALID));
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_MASK));
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_BIAS));
    EXPECT_EQ(info.limits.dk_multiple, 8);
    EXPECT_TRUE(info.limits.dv_equals_dk);
  }
}

TEST(OrtAdapters, AttentionMatchesTheLoopReferenceThroughEachTranslation) {
  for (const std::string& name : kAttention) {
    expect_matches_loop(name, make_problem(2, 4, 2, 5, 7, 8, 1), "grouped K/V, tq < tk");
    Problem causal = make_problem(1, 2, 2, 3, 6, 4, 2);
    causal.causal = true;
    expect_matches_loop(name, causal, "is_causal, top-left");
    causal.align = Align::bottom_right;
    expect_matches_loop(name, causal, "causal bottom-right, in the bool mask");
    causal.key_valid = {1, 0, 1, 1, 0, 1};
    causal.window_left = 2;
    expect_matches_loop(name, causal, "key padding and a window");
    causal.softcap = 2;
    causal.bias = Broadcast<double>{1, 1, std::vector<double>(18)};
    for (size_t e = 0; e < causal.bias->data.size(); ++e) causal.bias->data[e] = 0.125 * (e % 5);
    expect_matches_loop(name, causal, "softcap and a bias, in the float mask");
    // A row without keys: zeros (declared `zero`), through either mask.
    Problem empty = make_problem(1, 1, 1, 2, 3, 8, 3);
    empty.key_valid = {0, 0, 0};
    for (bool with_bias : {false, true}) {
      if (with_bias) empty.bias = Broadcast<double>{1, 1, std::vector<double>(6, 0.5)};
      const ForwardResult r = impl(name)->forward(empty);
      ASSERT_EQ(r.status, Status::ok) << r.error;
      EXPECT_EQ(r.out, std::vector<double>(16, 0.0)) << name << (with_bias ? " float" : " bool");
    }
  }
}

TEST(OrtAdapters, GroupQueryAttentionMatchesTheLoopReferenceAndRefusesWithAReason) {
  for (const std::string& name : kGqa) {
    Problem prompt = make_problem(2, 4, 2, 5, 5, 8, 4);
    prompt.causal = true;
    expect_matches_loop(name, prompt, "prompt, causal");
    Problem past = make_problem(1, 4, 2, 2, 5, 16, 5);
    past.causal = true;
    past.align = Align::bottom_right;
    past.softcap = 3;
    expect_matches_loop(name, past, "3 past keys, 2 new, softcap");
    expect_matches_loop(name, make_problem(3, 2, 1, 1, 6, 8, 6), "decode, not causal");
    Problem window = make_problem(1, 2, 1, 6, 6, 8, 7);
    window.causal = true;
    window.window_left = 1;
    expect_matches_loop(name, window, "window of 2 keys");

    Problem not_causal = make_problem(1, 2, 1, 3, 3, 8, 8);
    Problem batch_past = make_problem(2, 2, 1, 2, 5, 8, 9);
    batch_past.causal = true;
    batch_past.align = Align::bottom_right;
    for (const Problem* p : {&not_causal, &batch_past}) {
      const ForwardResult r = impl(name)->forward(*p);
      EXPECT_EQ(r.status, Status::unsupported);
      EXPECT_NE(r.error.find("GroupQueryAttention"), std::string::npos) << r.error;
    }
  }
}

// Whether a failed outcome is only the refusal check: GroupQueryAttention
// refuses what it cannot compute (non-causal problems with more than one
// query, tq > tk, past keys with several new tokens in batch > 1), and the
// ABI cannot yet declare those constraints (issue 52, item 3), so the
// property fails naming the declared feature whose cases were refused.
// Every case it judged passed.
bool only_refusals(const PropertyOutcome& o) {
  return o.message.starts_with("FAILED " + o.property + " on " + o.impl +
                               ": the implementation refused (answered UNSUPPORTED)");
}

// The whole catalog at a small case budget, real sizes off (under a
// second per adapter): each property passes, or is skipped or answered
// unsupported for a reason. A failure is a finding about ONNX Runtime (or
// a declaration) and its report is printed; for GroupQueryAttention the
// refusal failures above are expected until the ABI can state its
// constraints, and nothing else.
TEST(OrtAdapters, PassTheCatalogAtASmallBudget) {
  for (const std::string& adapter : all_adapters()) {
    const bool gqa = adapter.starts_with("ort_gqa");
    for (const PropertyDef& prop : property_defs()) {
      SCOPED_TRACE(adapter + " " + prop.name);
      RunConfig config;
      config.seed = kDefaultSeed;
      config.cases = 12;
      config.real_sizes = false;
      const PropertyOutcome o = run_property(prop, *impl(adapter), DType::f32, config);
      EXPECT_NE(o.status, PropertyStatus::not_run) << o.message;
      if (o.status != PropertyStatus::failed) continue;
      EXPECT_TRUE(gqa && only_refusals(o)) << o.message;
    }
  }
}

}  // namespace
}  // namespace attncheck
