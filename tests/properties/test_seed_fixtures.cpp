// The worked exercise's fixtures: exercise 1's numbers from the oracle and
// from every implementation, and its asymmetric companion, which a softmax
// over the wrong axis fails although the symmetric example hides it.

#include <gtest/gtest.h>

#include "judge/compare.h"
#include "attncheck/fixture.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

const std::string kSeed = std::string(ATTNCHECK_SOURCE_DIR) + "/fixtures/seed_exercise1.json";
const std::string kAsymmetric =
    std::string(ATTNCHECK_SOURCE_DIR) + "/fixtures/seed_exercise1_asymmetric.json";

// The implementation's answer against the oracle within SPEC 4 tolerances.
Comparison judge(const Implementation& impl, const Problem& p) {
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, impl.info().precision);
  const ForwardResult r = impl.forward(p);
  EXPECT_EQ(r.status, Status::ok) << r.error;
  Comparison c;
  c.add("out", {p.batch, p.heads, p.tq, p.dv}, r.out, o.out, t.out);
  if (impl.info().has(ATTNCHECK_FEATURE_WEIGHTS)) {
    c.add("weights", {p.batch, p.heads, p.tq, p.tk}, r.weights, o.weights, t.weights);
  }
  return c;
}

Problem in_dtype(Problem p, DType d) {
  p.dtype = d;  // the fixtures' values are small integers: exact in every dtype
  return p;
}

TEST(SeedFixtures, OracleGivesExerciseOnesNumbers) {
  const Problem p = load_fixture(kSeed).problem;
  const OracleResult o = oracle(p);
  const std::vector<double> weights = {0.6698, 0.3302, 0.3302, 0.6698};
  const std::vector<double> out = {1.3395, 1.3210, 0.6605, 2.6790};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_NEAR(o.weights[k], weights[k], 5e-5);
    EXPECT_NEAR(o.out[k], out[k], 5e-5);
  }
}

TEST(SeedFixtures, EveryCorrectImplementationMatchesTheOracle) {
  for (const std::string& path : {kSeed, kAsymmetric}) {
    const Problem p = load_fixture(path).problem;
    for (const auto& impl : registered_impls()) {
      if (impl->info().kind == Kind::broken) continue;
      for (DType d : {DType::f64, DType::f32}) {
        if (!impl->info().supports(d)) continue;
        const Comparison c = judge(*impl, in_dtype(p, d));
        EXPECT_TRUE(c.ok()) << impl->info().name << " on " << path << "\n" << c.describe_failures();
      }
    }
  }
}

TEST(SeedFixtures, WrongAxisSoftmaxHidesInTheSymmetricExampleOnly) {
  const auto wrong_axis = find_impl("broken_softmax_query_axis");
  ASSERT_NE(wrong_axis, nullptr);
  EXPECT_TRUE(judge(*wrong_axis, load_fixture(kSeed).problem).ok());
  EXPECT_FALSE(judge(*wrong_axis, load_fixture(kAsymmetric).problem).ok());
}

}  // namespace
}  // namespace attncheck
