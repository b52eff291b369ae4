// The ggml adapters (impls/ggml/): that their view of ggml's dispatch is
// what ggml computes, and each finding of docs/ggml.md recomputed here
// independently of the harness (ggml's arithmetic simulated in a few lines,
// the exact value by hand) against what ggml returns today. A finding that
// ggml fixes fails its test here: the docs page, the fixtures and
// fixtures/expected-failures.json then change with it.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/fixture.h"
#include "attncheck/registry.h"
#include "attncheck/oracle.h"
#include "judge/causes.h"
#include "attncheck/session.h"
#include "impls/ggml/ggml_graph.h"

namespace attncheck {
namespace {

using impls::ggml_adapters::flash_path;
using impls::ggml_adapters::GgmlSetup;
using impls::ggml_adapters::Graph;

std::shared_ptr<const Implementation> impl(const std::string& name) {
  auto found = find_impl(name);
  if (!found) throw std::runtime_error("not registered: " + name);
  return found;
}

// The setup an adapter's name stands for (ggml_adapters.cpp).
GgmlSetup setup_of(const std::string& name) {
  GgmlSetup s;
  s.graph = name.starts_with("ggml_fa_") ? Graph::flash : Graph::softmax;
  s.kv = name.find("bf16") != std::string::npos   ? DType::bf16
         : name.find("f16") != std::string::npos  ? DType::f16
         : name.find("q8_0") != std::string::npos ? DType::q8_0
         : name.find("q4_0") != std::string::npos ? DType::q4_0
                                                  : DType::f32;
  s.threads = name.ends_with("_mt") ? 3 : 1;
  s.use_ref = name.ends_with("_ref");
  return s;
}

// One head, Q in f32, K/V in `kv`, scale 1, zeros.
Problem problem(DType kv, int64_t tq, int64_t tk, int64_t dk, int64_t dv) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, tq, tk, dk, dv);
  if (kv != DType::f32) p.kv_dtype = kv;
  p.scale = 1.0;
  return p;
}

ForwardResult run(const std::string& name, const Problem& p) {
  p.validate();
  ForwardResult r = impl(name)->forward(p);
  if (r.status != Status::ok) throw std::runtime_error(name + ": forward failed: " + r.error);
  return r;
}

// The name of the path the call reported.
std::string reported_path(const std::string& name, const ForwardResult& r) {
  const auto& paths = impl(name)->info().paths;
  return r.path < 0 ? "" : paths.at(static_cast<size_t>(r.path)).name;
}

// f16 rounding of a sum, as ggml's f16 accumulator (VKQ16) stores it.
double f16(double x) {
  const float f = static_cast<float>(x);
  if (std::fabs(f) >= 65520.0f) return std::copysign(std::numeric_limits<double>::infinity(), x);
  int e = 0;
  std::frexp(f, &e);
  const double ulp = std::ldexp(1.0, std::max(e, -13) - 11);  // 11 significant bits
  return std::nearbyint(x / ulp) * ulp;                          // ties to even
}

// ---- Dispatch: the adapter's view (flash_path) against what ggml computes ----

// Q = 1 + 2^-12 is 1 in f16 and bf16 and itself in f32: the vec path
// rounds Q to K's format (q_to_vec_dot), the tiled path keeps it in f32.
// With keys 4 and 0 and values e_0 and 0, out[i][0] = 1 / (1 + e^{-4q}):
// the two readings differ by 1.7e-5, f32 resolves 1e-7.
TEST(GgmlDispatch, QRoundingTellsTheTiledPathFromTheVecPath) {
  for (const std::string name : {"ggml_fa_f16", "ggml_fa_f16_mt", "ggml_fa_f16_ref", "ggml_fa_bf16",
                                 "ggml_fa_bf16_mt"}) {
    for (const int64_t tq : {1, 63, 64, 65, 130}) {
      SCOPED_TRACE(name + " tq " + std::to_string(tq));
      const GgmlSetup s = setup_of(name);
      Problem p = problem(s.kv, tq, 2, 1, 16);
      const double q = 1.0 + std::ldexp(1.0, -12);
      for (double& x : p.q.data) x = q;
      p.k.data = {4.0, 0.0};
      p.v.at(0, 0, 0, 0) = 1.0;
      const ForwardResult r = run(name, p);
      const double rounded = 1.0 / (1.0 + std::exp(-4.0)), kept = 1.0 / (1.0 + std::exp(-4.0 * q));
      const bool q_kept = std::string(flash_path(p, s)) == impls::ggml_adapters::kPathTiled;
      for (int64_t i = 0; i < tq; ++i) {
        const double got = r.out[static_cast<size_t>(i * 16)];
        EXPECT_NEAR(got, q_kept ? kept : rounded, 2e-7) << "row " << i;
      }
      EXPECT_EQ(reported_path(name, r), flash_path(p, s));
    }
  }
}

// Decode over n keys of value 1 with equal scores: one f16 accumulator
// stops at 2048 (2049 is a tie, rounded to even), so one pass gives
// 2048 / n; split_kv over 3 threads sums chunks of ceil(n / 3) <= 2048
// exactly and joins them in f32: 1. Key 0 of value 2048 makes the f16
// accumulator stagnate from the start, so 511 keys (vec) and 512 keys
// (split_kv) differ as well.
TEST(GgmlDispatch, ChunkedSumsTellTheSplitKvPath) {
  struct Case {
    std::string name;
    int64_t tq, tk;
    double v0;
  };
  for (const Case& c : std::vector<Case>{{"ggml_fa_f16_mt", 1, 3000, 1},
                                         {"ggml_fa_f16_mt", 2, 3000, 1},
                                         {"ggml_fa_f16", 1, 3000, 1},
                                         {"ggml_fa_f16_ref", 1, 3000, 1},
                                         {"ggml_fa_f16_mt", 1, 511, 2048},
                                         {"ggml_fa_f16_mt", 1, 512, 2048}}) {
    SCOPED_TRACE(c.name + " tq " + std::to_string(c.tq) + " tk " + std::to_string(c.tk));
    const GgmlSetup s = setup_of(c.name);
    Problem p = problem(s.kv, c.tq, c.tk, 1, 16);
    for (double& x : p.v.data) x = 1.0;
    for (int64_t d = 0; d < 16; ++d) p.v.at(0, 0, 0, d) = c.v0;
    const ForwardResult r = run(c.name, p);
    const std::string path = flash_path(p, s);
    // Each chunk summed in f16, key by key; chunks joined in f32.
    const int64_t chunks = path == impls::ggml_adapters::kPathSplitKv ? s.threads : 1;
    const int64_t chunk = (c.tk + chunks - 1) / chunks;
    double total = 0;
    for (int64_t first = 0; first < c.tk; first += chunk) {
      double acc = 0;
      for (int64_t j = first; j < std::min(c.tk, first + chunk); ++j) acc = f16(acc + (j == 0 ? c.v0 : 1.0));
      total += acc;
    }
    EXPECT_NEAR(r.out[0], total / static_cast<double>(c.tk), 1e-6);
    EXPECT_EQ(reported_path(c.name, r), path);
  }
  // The two readings differ where the test needs them to.
  EXPECT_NE(std::string(flash_path(problem(DType::f16, 1, 512, 1, 16), setup_of("ggml_fa_f16_mt"))),
            flash_path(problem(DType::f16, 1, 511, 1, 16), setup_of("ggml_fa_f16_mt")));
}

// bf16 K/V never take the tiled or split_kv paths (only f16 and f32 do):
// the adapters declare one path.
TEST(GgmlDispatch, Bf16HasOnePath) {
  EXPECT_EQ(impl("ggml_fa_bf16")->info().paths.size(), 1u);
  EXPECT_EQ(impl("ggml_fa_f16_ref")->info().paths.size(), 1u);
  EXPECT_EQ(impl("ggml_fa_f16")->info().paths.size(), 3u);
}

// ---- Block-quantized K/V (q8_0, q4_0) ----

// ggml's flash attention takes the vec path for block K/V whatever the
// shape (tiled and split_kv need f16 or f32 K/V): one declared path, and
// flash_path says vec where f16 would tile or split.
TEST(GgmlBlocks, FlashAttentionHasOnlyTheVecPath) {
  for (const std::string name : {"ggml_fa_q8_0", "ggml_fa_q4_0"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(impl(name)->info().paths.size(), 1u);
    const GgmlSetup s = setup_of(name);
    EXPECT_STREQ(flash_path(problem(s.kv, 64, 64, 32, 32), s), impls::ggml_adapters::kPathVec);
    EXPECT_STREQ(flash_path(problem(s.kv, 1, 512, 32, 32), s), impls::ggml_adapters::kPathVec);
  }
}

// The block bytes reach ggml as SPEC 1.2 lays them out: with one key the
// weight is exactly 1 on both graphs, so the output is V's row exactly.
// Two blocks of different scales (one negative), every integer of q4_0
// once per half-block (nibble order) and q8_0's extremes.
TEST(GgmlBlocks, OneKeyReturnsTheBlockValues) {
  for (const std::string name : {"ggml_fa_q8_0", "ggml_fa_q4_0", "ggml_softmax_q8_0",
                                 "ggml_softmax_q4_0"}) {
    SCOPED_TRACE(name);
    const GgmlSetup s = setup_of(name);
    Problem p = problem(s.kv, 1, 1, 32, 64);
    for (int64_t d = 0; d < 64; ++d) {
      const int n = s.kv == DType::q4_0 ? static_cast<int>(d % 16) - 8
                    : d == 0            ? -128
                    : d == 1            ? 127
                                        : static_cast<int>(d) * 3 - 100;
      p.v.at(0, 0, 0, d) = (d < 32 ? 0.5 : -3.0) * n;
    }
    const ForwardResult r = run(name, p);
    for (int64_t d = 0; d < 64; ++d)
      EXPECT_EQ(r.out[static_cast<size_t>(d)], p.v.at(0, 0, 0, d)) << d;
  }
}

// Q is quantized to q8_0 before q.k on both graphs (SPEC 4.1 q_cast
// Q8_0): q = (1, 2^-8, 0, ...) has block scale 1/127, and 2^-8 * 127 =
// 0.496 rounds to 0. Key 0 = (0, 256, 0, ...) then scores 0 instead of 1
// (key 1 scores 0): values 1 and 0 give 1/2, not e / (1 + e) = 0.731.
TEST(GgmlBlocks, QIsQuantizedToQ8_0) {
  for (const std::string name : {"ggml_fa_q8_0", "ggml_fa_q4_0", "ggml_softmax_q8_0",
                                 "ggml_softmax_q4_0"}) {
    SCOPED_TRACE(name);
    Problem p = problem(setup_of(name).kv, 1, 2, 32, 32);
    p.q.at(0, 0, 0, 0) = 1.0;
    p.q.at(0, 0, 0, 1) = std::ldexp(1.0, -8);
    p.k.at(0, 0, 0, 1) = 256.0;
    for (int64_t d = 0; d < 32; ++d) p.v.at(0, 0, 0, d) = 1.0;
    EXPECT_EQ(run(name, p).out[0], 0.5);
  }
}

// What ggml computes where attncheck's tolerance fails it (docs/ggml.md,
// "A gap in attncheck's tolerance"; the fixture
// fixtures/ggml/attncheck-gap/q8_0-logit-error-past-linearisation.json): a
// q4_0 key scored against q = (24, 3, 0, ...) and a sink of 0. Q's q8_0
// block has d = f16(24 / 127) = 0.188964844 and integers (127, 16), so
// q.k = d (127 * -32 + 16 * 224) = -90.703125 instead of -96: the output
// is 32768 e^s / (1 + e^s) at that score, 199.7 times the exact one. That
// is the declared arithmetic (q_cast Q8_0), on both graphs; the linear
// bound a_j D_j on the weight (D_j = 25 here) does not hold it.
TEST(GgmlBlocks, Q8_0LogitErrorPastLinearisationIsGgmlsDeclaredArithmetic) {
  Problem p = problem(DType::q4_0, 1, 1, 32, 32);
  p.q.at(0, 0, 0, 0) = 24.0;
  p.q.at(0, 0, 0, 1) = 3.0;
  p.k.at(0, 0, 0, 0) = -32.0;
  p.k.at(0, 0, 0, 1) = 224.0;
  p.v.at(0, 0, 0, 0) = 32768.0;
  p.sink = {0.0};
  const double d = std::ldexp(1548.0, -13);  // f16(24 / 127): 24 / 127 = 1548.09 * 2^-13
  const double score = d * (127 * -32 + 16 * 224);
  EXPECT_EQ(score, -90.703125);
  const double declared = 32768.0 * std::exp(score) / (1 + std::exp(score));
  const double exact = 32768.0 * std::exp(-96.0) / (1 + std::exp(-96.0));
  EXPECT_GT(declared / exact, 199.0);
  for (const std::string name : {"ggml_fa_q4_0", "ggml_softmax_q4_0"}) {
    SCOPED_TRACE(name);
    EXPECT_NEAR(run(name, p).out[0], declared, 1e-5 * declared);
  }
}

// ---- Findings (docs/ggml.md), recomputed ----

// F1. The f16 P.V accumulator overflows: two keys of value 32768 with
// equal scores sum to 65536 in VKQ16, past f16's largest finite 65504, so
// the output is inf; the exact output is 32768, an f16 value. With f32
// K/V (an f32 accumulator) ggml returns 32768.
TEST(GgmlFinding, F16AccumulatorOverflowsOnRepresentableOutput) {
  for (const std::string name : {"ggml_fa_f16", "ggml_fa_f16_mt", "ggml_fa_f16_ref"}) {
    SCOPED_TRACE(name);
    Problem p = problem(DType::f16, 1, 2, 1, 1);
    p.v.data = {32768.0, 32768.0};
    EXPECT_TRUE(std::isinf(f16(f16(0 + 32768.0) + 32768.0)));  // the simulation
    EXPECT_TRUE(std::isinf(run(name, p).out[0]));
  }
  Problem p = problem(DType::f32, 1, 2, 1, 1);
  p.v.data = {32768.0, 32768.0};
  EXPECT_EQ(run("ggml_fa_f32", p).out[0], 32768.0);
  EXPECT_EQ(run("ggml_softmax_f16", [] {
              Problem q = problem(DType::f16, 1, 2, 1, 1);
              q.v.data = {32768.0, 32768.0};
              return q;
            }()).out[0],
            32768.0);
}

// F2. The f16 P.V accumulator stagnates: 3000 keys of value 1 with equal
// scores (exact output 1) give 2048 / 3000 = 0.683 on the vec path and on
// one thread's split_kv; an accumulator of f32 gives 1.
TEST(GgmlFinding, F16AccumulatorStagnatesOverLongRows) {
  for (const std::string name : {"ggml_fa_f16", "ggml_fa_f16_ref"}) {
    SCOPED_TRACE(name);
    Problem p = problem(DType::f16, 1, 3000, 1, 1);
    for (double& x : p.v.data) x = 1.0;
    EXPECT_NEAR(run(name, p).out[0], 2048.0 / 3000.0, 1e-6);
  }
  Problem p = problem(DType::f32, 1, 3000, 1, 1);
  for (double& x : p.v.data) x = 1.0;
  EXPECT_NEAR(run("ggml_fa_f32", p).out[0], 1.0, 1e-6);
}

// F3. The soft_max graph gives NaN for a query with no allowed key (the
// max of an all -inf row is -inf, and exp(-inf - -inf) is NaN); flash
// attention gives 0 (its sum S = 0 becomes 1/S = 0).
TEST(GgmlFinding, SoftmaxGraphGivesNanOnAnEmptyRow) {
  Problem p = problem(DType::f16, 1, 2, 1, 1);
  p.v.data = {1.0, 2.0};
  p.key_valid = {0, 0};
  EXPECT_TRUE(std::isnan(run("ggml_softmax_f16", p).out[0]));
  EXPECT_EQ(run("ggml_fa_f16", p).out[0], 0.0);
}

// F4. The tiled path (64 queries or more, f16 or f32 K/V) pads its last
// key tile with -inf scores, then applies the softcap to them: tanh(-inf)
// * c = -c, a real score. Without a mask (which would add -inf again) the
// padding takes weight. 64 queries, one key of value 1 with score 0,
// softcap 1: the 63 padded keys score -1 each and carry value 0, so ggml
// returns 1 / (1 + 63 e^-1) = 0.0414 where the exact output is 1. With
// 63 queries (vec path) it returns 1.
TEST(GgmlFinding, TiledSoftcapTurnsKeyPaddingIntoKeys) {
  for (const std::string name : {"ggml_fa_f16", "ggml_fa_f32", "ggml_fa_f32_mt"}) {
    SCOPED_TRACE(name);
    const GgmlSetup s = setup_of(name);
    for (const int64_t tq : {63, 64}) {
      Problem p = problem(s.kv, tq, 1, 1, 16);
      p.softcap = 1.0;
      for (int64_t d = 0; d < 16; ++d) p.v.at(0, 0, 0, d) = 1.0;
      const ForwardResult r = run(name, p);
      const double expect = tq == 64 ? 1.0 / (1.0 + 63.0 * std::exp(-1.0)) : 1.0;
      EXPECT_NEAR(r.out[0], expect, 1e-6) << "tq " << tq;
    }
  }
}

// F5. In the same last tile the padded rows of V hold the previous tile's
// values (V32 is cleared once, before the first tile): with 65 keys the
// 63 padded keys of the second tile score -c and carry the values of keys
// 1..63. Key 0 of value 64 and the others of value 1, all scores 0,
// softcap 1: exact output (64 + 64) / 65 = 1.969...; ggml adds 63 keys of
// weight e^-1 and value 1 (the previous tile's rows 1..63).
TEST(GgmlFinding, TiledLastTileReusesThePreviousTilesValues) {
  Problem p = problem(DType::f32, 64, 65, 1, 16);
  p.softcap = 1.0;
  for (int64_t j = 0; j < 65; ++j)
    for (int64_t d = 0; d < 16; ++d) p.v.at(0, 0, j, d) = j == 0 ? 64.0 : 1.0;
  const double exact = (64.0 + 64.0) / 65.0;
  const double w = std::exp(-1.0);
  const double ggml = (64.0 + 64.0 + 63.0 * w) / (65.0 + 63.0 * w);
  const ForwardResult r = run("ggml_fa_f32", p);
  EXPECT_GT(std::fabs(ggml - exact), 0.1);
  EXPECT_NEAR(r.out[0], ggml, 1e-5);
}

// F6 (builds whose f16 dot sums in f16: AVX512-FP16, ARM fp16 vector
// arithmetic). ggml_vec_dot_f16 keeps q.k in f16 lanes: q = k = 32 over
// 128 dims sums to 131072, past f16's range, and the score is inf, the
// output NaN (0 - 0 * inf); the exact output is 1 (scores 2048 and 1024
// after the scale 1/64). Builds that sum in f32 return 1.
// fixtures/ggml/native-f16/f16-dot-overflow.json is this case.
TEST(GgmlFinding, NativeF16DotOverflowsOnLargeScores) {
  Problem p = problem(DType::f16, 1, 2, 128, 1);
  p.scale = 1.0 / 64;
  for (double& x : p.q.data) x = 32.0;
  for (int64_t d = 0; d < 128; ++d) {
    p.k.at(0, 0, 0, d) = 32.0;
    p.k.at(0, 0, 1, d) = 16.0;
  }
  p.v.data = {1.0, 0.0};
  const double got = run("ggml_fa_f16", p).out[0];
  if (impls::ggml_adapters::f16_dot_sums_in_f16()) {
    EXPECT_TRUE(std::isnan(got)) << got;
  } else {
    EXPECT_EQ(got, 1.0);
  }
}

}  // namespace
}  // namespace attncheck

// ---- Known findings by cause (docs/cli.md): F1 is expected at every seed,
// a second bug is not hidden by it ----

namespace attncheck {
namespace {

// ggml_fa_f16 with one more bug of its own: the scale argument ignored
// (1/sqrt(dk) always, a catalogued class), declared as ggml_fa_f16 is.
class ScaleTwin : public Implementation {
 public:
  explicit ScaleTwin(std::shared_ptr<const Implementation> inner)
      : inner_(std::move(inner)), info_(inner_->info()) {
    info_.name = "ggml_fa_f16_scale_twin";
    info_.kind = Kind::broken;
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    Problem q = p;
    q.scale = Problem::default_scale(p.dk);
    return inner_->forward(q);
  }

 private:
  std::shared_ptr<const Implementation> inner_;
  ImplInfo info_;
};

// The repository's list, read from the source folder (its fixtures are
// named relative to it).
ExpectedFailures repository_list() {
  const std::string root = ATTNCHECK_SOURCE_DIR;
  ExpectedFailures list = load_expected_failures(root + "/fixtures/expected-failures.json");
  return list;
}

SessionResult run_with_findings(std::shared_ptr<const Implementation> impl, uint64_t seed,
                                const std::vector<std::string>& properties,
                                const ExpectedFailures& list) {
  SessionConfig config;
  config.impls = {std::move(impl)};
  for (const std::string& name : properties) config.properties.push_back(find_property(name));
  config.dtype = DType::f32;
  config.run.seed = seed;
  config.expected_failures = list;
  return run_session(config, {});
}

// The properties F1 met at some seed in the CI profile (docs/ggml.md).
const std::vector<std::string> kF1Properties = {
    "ConstantValuesReproduced", "ValueLinearity", "CrossImplementationAgreement",
    "SinkIsAKeyWithoutValue", "ExtremeScoresStayFinite", "MatchesOracle"};

TEST(GgmlKnownFindings, F1IsExpectedByItsCauseAtEverySeed) {
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(ATTNCHECK_SOURCE_DIR);
  const ExpectedFailures list = repository_list();
  for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
    const SessionResult r = run_with_findings(impl("ggml_fa_f16"), seed, kF1Properties, list);
    for (const PropertyOutcome& o : r.outcomes) {
      SCOPED_TRACE(fmt::format("seed {} {}", seed, o.property));
      EXPECT_TRUE(o.status == PropertyStatus::passed || o.status == PropertyStatus::xfail ||
                  o.status == PropertyStatus::skipped)
          << status_name(o.status) << "\n" << o.message;
      if (o.status == PropertyStatus::xfail) {
        ASSERT_TRUE(o.expected.has_value());
        EXPECT_TRUE(o.expected->finding == "F1" || o.expected->finding == "F2" ||
                    o.expected->finding == "F4")
            << o.expected->finding;
        EXPECT_NE(o.message.find("expected: known finding"), std::string::npos) << o.message;
      }
    }
  }
  std::filesystem::current_path(cwd);
}

TEST(GgmlKnownFindings, ASecondBugFailsAtEverySeedAndIsNamed) {
  // The twin is named by the F1 and F2 entries, so only its own bug is
  // left to fail: MatchesOracle fails at every seed, never xfail.
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(ATTNCHECK_SOURCE_DIR);
  ExpectedFailures list = repository_list();
  for (ExpectedFinding& f : list.findings)
    if (f.names("ggml_fa_f16")) f.impls.push_back("ggml_fa_f16_scale_twin");
  const auto twin = std::make_shared<ScaleTwin>(impl("ggml_fa_f16"));
  for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
    const SessionResult r = run_with_findings(twin, seed, {"MatchesOracle"}, list);
    ASSERT_EQ(r.outcomes.size(), 1u);
    const PropertyOutcome& o = r.outcomes[0];
    SCOPED_TRACE(fmt::format("seed {}", seed));
    EXPECT_EQ(o.status, PropertyStatus::failed) << o.message;
    EXPECT_FALSE(o.expected.has_value());
    // The new bug is named by the diagnosis, not hidden as F1.
    EXPECT_NE(o.message.find("the scale argument ignored"), std::string::npos) << o.message;
    EXPECT_EQ(o.message.find("expected: known finding"), std::string::npos) << o.message;
  }
  std::filesystem::current_path(cwd);
}

}  // namespace
}  // namespace attncheck
