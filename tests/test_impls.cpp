// Tests of the built-in implementations: the registry holds them, the
// references compute exercise 1 and agree with each other and the oracle,
// empty rows follow the declared policy, and every broken implementation
// really has its bug.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "attncheck/oracle.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

const std::vector<std::string> kReferenceNames = {
    "batched_f32", "batched_f64", "loop_f32", "loop_f64", "loop_zero_f64"};

std::shared_ptr<const Implementation> impl(const std::string& name) {
  auto found = find_impl(name);
  if (!found) throw std::runtime_error("not registered: " + name);
  return found;
}

// Small exact values (multiples of 1/8 in [-2, 2]) from a fixed LCG, so the
// cases are "random-ish" yet identical on every run and representable in f32.
class Values {
 public:
  explicit Values(uint64_t seed) : state_(seed) {}
  double next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(static_cast<int64_t>((state_ >> 33) % 33) - 16) /
           8.0;
  }

 private:
  uint64_t state_;
};

void fill(Tensor& t, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
          Values& values) {
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c)
        for (int64_t d = 0; d < d3; ++d) t.at(a, b, c, d) = values.next();
}

void fill_all(Problem& p, uint64_t seed) {
  Values values(seed);
  fill(p.q, p.batch, p.heads, p.tq, p.dk, values);
  fill(p.k, p.batch, p.kv_heads, p.tk, p.dk, values);
  fill(p.v, p.batch, p.kv_heads, p.tk, p.dv, values);
}

// Exercise 1: Q = K = I (2x2), V = [[2, 0], [0, 4]], default scale.
Problem exercise1(DType dtype) {
  Problem p = Problem::zeros(dtype, 1, 1, 1, 2, 2, 2, 2);
  p.q.at(0, 0, 0, 0) = p.q.at(0, 0, 1, 1) = 1;
  p.k.at(0, 0, 0, 0) = p.k.at(0, 0, 1, 1) = 1;
  p.v.at(0, 0, 0, 0) = 2;
  p.v.at(0, 0, 1, 1) = 4;
  return p;
}

// Bitwise in the sense of SPEC section 2: +0 equals -0, NaN equals nothing.
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

bool same_result(const ForwardResult& a, const ForwardResult& b) {
  return a.status == b.status && same_values(a.out, b.out) &&
         same_values(a.weights, b.weights) && same_values(a.lse, b.lse);
}

void expect_near_all(const std::vector<double>& got,
                     const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

TEST(Registry, HoldsTheReferenceImplementations) {
  for (const auto& name : kReferenceNames) {
    const auto found = find_impl(name);
    ASSERT_TRUE(found) << name;
    EXPECT_EQ(found->info().kind, Kind::reference) << name;
    EXPECT_FALSE(found->info().description.empty()) << name;
    EXPECT_EQ(found->info().precision.exp_ulps, 1u) << name;
    EXPECT_EQ(found->info().precision.key_block, 0) << name;
  }
  EXPECT_EQ(impl("loop_zero_f64")->info().empty_rows, EmptyRowPolicy::zero);
  EXPECT_EQ(impl("loop_f64")->info().empty_rows, EmptyRowPolicy::error);
  EXPECT_TRUE(impl("loop_f32")->info().supports(DType::f32));
  EXPECT_FALSE(impl("loop_f32")->info().supports(DType::f64));
  EXPECT_EQ(impl("loop_f32")->info().precision.accum, DType::f32);
  EXPECT_FALSE(impl("batched_f64")->info().has(ATTNCHECK_FEATURE_LSE));
}

TEST(Registry, EveryBrokenImplementationNamesItsProperty) {
  const std::set<std::string> properties = {"MatchesOracle",
                                            "RowSumsToOne",
                                            "MaskedWeightsAreZero",
                                            "PermutationEquivariance",
                                            "ScaledScoreVarianceNearOne",
                                            "EmptyRowsAreRejected",
                                            "ConstantValuesReproduced"};
  int broken = 0;
  for (const auto& i : registered_impls()) {
    if (i->info().kind != Kind::broken) continue;
    ++broken;
    EXPECT_TRUE(properties.count(i->info().caught_by))
        << i->info().name << " caught_by '" << i->info().caught_by << "'";
    EXPECT_FALSE(i->info().description.empty()) << i->info().name;
    EXPECT_TRUE(i->info().has(ATTNCHECK_FEATURE_WEIGHTS)) << i->info().name;
  }
  EXPECT_GE(broken, 10);
}

TEST(Reference, Exercise1) {
  const std::vector<double> weights = {0.6698, 0.3302, 0.3302, 0.6698};
  const std::vector<double> out = {1.3395, 1.3210, 0.6605, 2.6790};
  for (const auto& name : kReferenceNames) {
    const auto i = impl(name);
    const DType dtype =
        i->info().supports(DType::f64) ? DType::f64 : DType::f32;
    const ForwardResult r = i->forward(exercise1(dtype));
    ASSERT_EQ(r.status, Status::ok) << name << ": " << r.error;
    expect_near_all(r.weights, weights, 5e-5, name + " weights");
    expect_near_all(r.out, out, 5e-5, name + " out");
  }
}

TEST(Reference, LoopAndBatchedAgree) {
  // Bottom-right causal with tk > tq and key padding that leaves every row
  // at least one key (query 0 sees keys 0..2).
  Problem p = Problem::zeros(DType::f64, 2, 3, 3, 5, 7, 4, 4);
  fill_all(p, 1);
  p.causal = true;
  p.align = Align::bottom_right;
  p.key_valid.assign(14, 1);
  p.key_valid[1] = 0;
  p.key_valid[7 + 5] = p.key_valid[7 + 6] = 0;
  ASSERT_FALSE(p.has_empty_rows());
  const ForwardResult loop = impl("loop_f64")->forward(p);
  const ForwardResult batched = impl("batched_f64")->forward(p);
  ASSERT_EQ(loop.status, Status::ok) << loop.error;
  ASSERT_EQ(batched.status, Status::ok) << batched.error;
  expect_near_all(batched.out, loop.out, 1e-13, "out");
  expect_near_all(batched.weights, loop.weights, 1e-13, "weights");
  EXPECT_TRUE(batched.lse.empty());
}

// Every feature at once: GQA, padded q strides, key padding, bottom-right
// causal, a window, a broadcast mask and bias, softcap and a non-default
// scale.
Problem every_feature() {
  Problem p = Problem::zeros(DType::f64, 2, 4, 2, 3, 6, 3, 2);
  p.q.data.assign(2 * 4 * 4 * 5, 0.0);
  p.q.strides = {4 * 4 * 5, 4 * 5, 5, 1};
  fill_all(p, 7);
  p.key_valid = {1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1};
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 3;
  p.window_right = 0;
  Broadcast<uint8_t> mask;
  mask.batch = 1;
  mask.heads = 4;
  mask.data.assign(4 * 3 * 6, 1);
  mask.at(0, 1, 2, 5, 3, 6) = 0;
  mask.at(0, 2, 0, 3, 3, 6) = 0;
  p.mask = mask;
  Broadcast<double> bias;
  bias.batch = 2;
  bias.heads = 1;
  Values values(11);
  for (int n = 0; n < 2 * 3 * 6; ++n) bias.data.push_back(values.next());
  p.bias = bias;
  p.softcap = 2.5;
  p.scale = 0.75;
  return p;
}

TEST(Reference, LoopMatchesOracleOnEveryFeature) {
  const Problem p = every_feature();
  ASSERT_NO_THROW(p.validate());
  ASSERT_FALSE(p.has_empty_rows());
  const ForwardResult r = impl("loop_f64")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  const OracleResult o = oracle(p);
  expect_near_all(r.out, o.out, 1e-12, "out");
  expect_near_all(r.weights, o.weights, 1e-12, "weights");
  expect_near_all(r.lse, o.lse, 1e-12, "lse");
}

TEST(Reference, ErrorPolicyRejectsEmptyRows) {
  for (const auto& name : kReferenceNames) {
    const auto i = impl(name);
    if (i->info().empty_rows != EmptyRowPolicy::error) continue;
    const DType dtype =
        i->info().supports(DType::f64) ? DType::f64 : DType::f32;
    Problem p = Problem::zeros(dtype, 2, 2, 2, 2, 3, 2, 2);
    fill_all(p, 3);
    p.key_valid = {1, 1, 1, 0, 0, 0};
    const ForwardResult r = i->forward(p);
    EXPECT_EQ(r.status, Status::error) << name;
    EXPECT_NE(r.error.find("query (b="), std::string::npos) << name;
    EXPECT_EQ(r.error, "query (b=1, h=0, i=0) has no allowed key") << name;
  }
}

TEST(Reference, ZeroPolicyGivesExactZeros) {
  // Bottom-right causal with tq > tk: query 0 sits before key 0.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 3, 2, 2, 2);
  fill_all(p, 5);
  p.causal = true;
  p.align = Align::bottom_right;
  const ForwardResult r = impl("loop_zero_f64")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  for (int64_t d = 0; d < 2; ++d) {
    EXPECT_EQ(r.out[out_index(p, 0, 0, 0, d)], 0.0);
    EXPECT_FALSE(std::signbit(r.out[out_index(p, 0, 0, 0, d)]));
  }
  for (int64_t j = 0; j < 2; ++j)
    EXPECT_EQ(r.weights[weight_index(p, 0, 0, 0, j)], 0.0);
  EXPECT_EQ(r.lse[0], -std::numeric_limits<double>::infinity());
  // The non-empty rows are computed as usual.
  EXPECT_EQ(r.weights[weight_index(p, 0, 0, 1, 0)], 1.0);
  EXPECT_NEAR(r.weights[weight_index(p, 0, 0, 2, 0)] +
                  r.weights[weight_index(p, 0, 0, 2, 1)],
              1.0, 1e-15);
  EXPECT_TRUE(std::isfinite(r.lse[1]) && std::isfinite(r.lse[2]));
}

TEST(Reference, StridedInputsGiveBitwiseTheSameResult) {
  for (const std::string name : {"loop_f64", "loop_f32"}) {
    const auto i = impl(name);
    const DType dtype =
        i->info().supports(DType::f64) ? DType::f64 : DType::f32;
    Problem p = Problem::zeros(dtype, 2, 2, 1, 3, 4, 3, 2);
    fill_all(p, 9);
    p.causal = true;
    Problem strided = p;
    // q in [b][t][h][d] order with a padded head dimension, k and v with
    // padded rows; the gaps hold NaN so reading one would show.
    strided.q.data.assign(2 * 3 * 2 * 5, std::nan(""));
    strided.q.strides = {3 * 2 * 5, 5, 2 * 5, 1};
    strided.k.data.assign(2 * 1 * 4 * 7, std::nan(""));
    strided.k.strides = {4 * 7, 4 * 7, 7, 1};
    strided.v.data.assign(2 * 1 * 4 * 3, std::nan(""));
    strided.v.strides = {4 * 3, 4 * 3, 3, 1};
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 4; ++t) {
        for (int64_t h = 0; h < 2 && t < 3; ++h)
          for (int64_t d = 0; d < 3; ++d)
            strided.q.at(b, h, t, d) = p.q.at(b, h, t, d);
        for (int64_t d = 0; d < 3; ++d)
          strided.k.at(b, 0, t, d) = p.k.at(b, 0, t, d);
        for (int64_t d = 0; d < 2; ++d)
          strided.v.at(b, 0, t, d) = p.v.at(b, 0, t, d);
      }
    const ForwardResult a = i->forward(p);
    const ForwardResult b = i->forward(strided);
    ASSERT_EQ(a.status, Status::ok) << name << ": " << a.error;
    EXPECT_TRUE(same_result(a, b)) << name;
  }
}

// One query, two keys, dk = 1: the smallest case for most of the bugs.
Problem one_query(double q, double k0, double k1, double v0, double v1) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 1, 1);
  p.q.at(0, 0, 0, 0) = q;
  p.k.at(0, 0, 0, 0) = k0;
  p.k.at(0, 0, 1, 0) = k1;
  p.v.at(0, 0, 0, 0) = v0;
  p.v.at(0, 0, 1, 0) = v1;
  return p;
}

struct BugCase {
  std::string name;
  Problem problem;
  std::string correct;  // the reference with the declared empty-row policy
};

std::vector<BugCase> bug_cases() {
  std::vector<BugCase> cases;
  {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 2, 1, 1);
    p.q.at(0, 0, 0, 0) = 1;
    p.q.at(0, 0, 1, 0) = 2;
    p.k.at(0, 0, 0, 0) = 1;
    p.k.at(0, 0, 1, 0) = -1;
    p.v.at(0, 0, 0, 0) = 1;
    p.v.at(0, 0, 1, 0) = 2;
    cases.push_back({"broken_softmax_query_axis", p, "loop_f64"});
  }
  cases.push_back(
      {"broken_sum_skips_first_key", one_query(1, 1, 0, 1, 2), "loop_f64"});
  {
    Problem p = one_query(1, 1, 0, 1, 2);
    p.key_valid = {1, 0};
    cases.push_back({"broken_finite_mask_fill", p, "loop_f64"});
  }
  {
    // The masked score 1000 makes every allowed exponent underflow.
    Problem p = one_query(1, 1, 1000, 1, 2);
    p.key_valid = {1, 0};
    cases.push_back({"broken_max_over_masked", p, "loop_f64"});
  }
  cases.push_back(
      {"broken_alibi_always_on", one_query(1, 1, 1, 1, 2), "loop_f64"});
  {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 4, 1);
    for (int64_t d = 0; d < 4; ++d) p.q.at(0, 0, 0, d) = p.k.at(0, 0, 0, d) = 1;
    p.v.at(0, 0, 1, 0) = 1;
    cases.push_back({"broken_unscaled", p, "loop_f64"});
    cases.push_back({"broken_scale_over_dk", p, "loop_f64"});
  }
  {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 1, 1, 1);
    p.causal = true;
    p.align = Align::bottom_right;
    p.v.at(0, 0, 0, 0) = 3;
    cases.push_back({"broken_empty_row_nan", p, "loop_f64"});
    cases.push_back({"broken_empty_row_uniform", p, "loop_zero_f64"});
  }
  {
    Problem p = one_query(1, 1, 0, 3, 3);
    cases.push_back({"broken_extra_logit", p, "loop_f64"});
  }
  return cases;
}

TEST(Broken, EachBugShowsOnItsCase) {
  const auto cases = bug_cases();
  for (const auto& c : cases) {
    const auto bad = impl(c.name);
    ASSERT_NO_THROW(c.problem.validate()) << c.name;
    const ForwardResult got = bad->forward(c.problem);
    const ForwardResult want = impl(c.correct)->forward(c.problem);
    EXPECT_FALSE(same_result(got, want)) << c.name;
  }
  // Every registered broken implementation has a case here.
  for (const auto& i : registered_impls()) {
    if (i->info().kind != Kind::broken) continue;
    EXPECT_TRUE(
        std::any_of(cases.begin(), cases.end(),
                    [&](const BugCase& c) { return c.name == i->info().name; }))
        << i->info().name << " has no bug case";
  }
}

TEST(Broken, BugsHaveTheirShape) {
  const auto sum = [](const std::vector<double>& w) {
    double s = 0;
    for (double x : w) s += x;
    return s;
  };
  const auto cases = bug_cases();
  const auto run = [&](const std::string& name) {
    for (const auto& c : cases)
      if (c.name == name) return impl(name)->forward(c.problem);
    throw std::runtime_error("no case for " + name);
  };
  EXPECT_GT(sum(run("broken_sum_skips_first_key").weights), 1.01);
  EXPECT_GT(run("broken_finite_mask_fill").weights[1], 0.0);
  EXPECT_TRUE(std::isnan(run("broken_max_over_masked").out[0]));
  EXPECT_NE(run("broken_alibi_always_on").weights[0], 0.5);
  const ForwardResult nan_row = run("broken_empty_row_nan");
  EXPECT_EQ(nan_row.status, Status::ok);
  EXPECT_TRUE(std::isnan(nan_row.out[0]));
  const ForwardResult uniform = run("broken_empty_row_uniform");
  EXPECT_EQ(uniform.weights[0], 1.0);
  EXPECT_EQ(uniform.out[0], 3.0);
  EXPECT_LT(run("broken_extra_logit").out[0], 3.0);
}

TEST(Broken, MaskBugsArePureOnUnmaskedProblems) {
  // Without masked keys or empty rows these agree bitwise with loop_f64, so
  // only the property made for them can see them.
  Problem p = Problem::zeros(DType::f64, 1, 2, 1, 2, 3, 2, 2);
  fill_all(p, 13);
  const ForwardResult want = impl("loop_f64")->forward(p);
  for (const std::string name :
       {"broken_finite_mask_fill", "broken_max_over_masked",
        "broken_empty_row_nan", "broken_empty_row_uniform"}) {
    const ForwardResult got = impl(name)->forward(p);
    EXPECT_TRUE(same_result(got, want)) << name;
  }
}

}  // namespace
}  // namespace attncheck
