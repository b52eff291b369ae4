// Backward passes and their tolerances: the reference backward passes
// against central finite differences of loop_f64's forward and against the
// oracle; GradientsMatchOracle passing on correct backward passes and
// failing on broken ones; the gradient tolerance on inputs known to pass
// and known to fail.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "impls/impl_common.h"
#include "impls/loop_kernel.h"
#include "judge/compare.h"
#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

// A problem of the given shape with uniform values in [-1.5, 1.5] (rounded
// to the dtype) and a dout of the same kind.
Problem random_problem(std::mt19937_64& rng, DType dtype, int64_t batch, int64_t heads,
                       int64_t kv_heads, int64_t tq, int64_t tk, int64_t dk, int64_t dv) {
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  Problem p = Problem::zeros(dtype, batch, heads, kv_heads, tq, tk, dk, dv);
  for (auto* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = round_to(dtype, u(rng));
  p.dout.resize(static_cast<size_t>(batch * heads * tq * dv));
  for (double& x : p.dout) x = round_to(dtype, u(rng));
  return p;
}

// Problems exercising every feature loop_f64's backward handles.
std::vector<Problem> loop_problems() {
  std::mt19937_64 rng(42);
  std::vector<Problem> ps;
  ps.push_back(random_problem(rng, DType::f64, 1, 1, 1, 3, 4, 3, 2));
  {  // softcap and a bias
    Problem p = random_problem(rng, DType::f64, 1, 2, 2, 3, 3, 2, 2);
    p.softcap = 1.0;
    p.scale = 2.0;
    p.bias = Broadcast<double>{1, 2, std::vector<double>(2 * 3 * 3)};
    for (size_t k = 0; k < p.bias->data.size(); ++k) p.bias->data[k] = 0.25 * double(k % 5) - 0.5;
    ps.push_back(std::move(p));
  }
  {  // GQA with a mask and key padding
    Problem p = random_problem(rng, DType::f64, 2, 4, 2, 3, 4, 2, 3);
    p.key_valid = {1, 1, 0, 1, 1, 0, 1, 1};
    p.mask = Broadcast<uint8_t>{1, 1, {1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1}};
    ps.push_back(std::move(p));
  }
  {  // bottom-right causal with a window and tq < tk, GQA and softcap
    Problem p = random_problem(rng, DType::f64, 1, 2, 1, 3, 5, 2, 2);
    p.causal = true;
    p.align = Align::bottom_right;
    p.window_left = 2;
    p.softcap = 5.0;
    ps.push_back(std::move(p));
  }
  return ps;
}

// Problems inside batched_f64's features.
std::vector<Problem> batched_problems() {
  std::mt19937_64 rng(7);
  std::vector<Problem> ps;
  ps.push_back(random_problem(rng, DType::f64, 2, 2, 2, 3, 4, 3, 2));
  Problem p = random_problem(rng, DType::f64, 1, 3, 3, 4, 4, 2, 3);
  p.causal = true;
  p.key_valid = {1, 1, 0, 1};
  ps.push_back(std::move(p));
  return ps;
}

// L = sum dO . out of loop_f64's forward.
double loss(const Problem& p) {
  const ForwardResult r = impls::loop_forward<double>(p, EmptyRowPolicy::error);
  double l = 0;
  for (size_t k = 0; k < r.out.size(); ++k) l += p.dout[k] * r.out[k];
  return l;
}

// Central difference of L in every element of q, k and v, laid out like
// the gradients.
BackwardResult finite_differences(const Problem& p) {
  constexpr double h = 1e-5;
  BackwardResult g;
  const auto diff = [&](Tensor Problem::*t, int64_t heads, int64_t rows, int64_t cols,
                        std::vector<double>& out) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t x = 0; x < heads; ++x)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t d = 0; d < cols; ++d) {
            Problem plus = p, minus = p;
            (plus.*t).at(b, x, i, d) += h;
            (minus.*t).at(b, x, i, d) -= h;
            out.push_back((loss(plus) - loss(minus)) / (2 * h));
          }
  };
  diff(&Problem::q, p.heads, p.tq, p.dk, g.dq);
  diff(&Problem::k, p.kv_heads, p.tk, p.dk, g.dk);
  diff(&Problem::v, p.kv_heads, p.tk, p.dv, g.dv);
  return g;
}

// Truncation O(h^2) and roundoff O(u / h) of the central difference are
// below 1e-9 on these O(1) problems; 1e-7 leaves room and still catches a
// wrong formula (errors O(0.01) and up).
void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], 1e-7 * (1 + std::fabs(want[k]))) << what << "[" << k << "]";
  }
}

void expect_matches_finite_differences(const Implementation& impl, const Problem& p) {
  const BackwardResult r = impl.backward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  const BackwardResult fd = finite_differences(p);
  expect_near_all(r.dq, fd.dq, impl.info().name + " dq");
  expect_near_all(r.dk, fd.dk, impl.info().name + " dk");
  expect_near_all(r.dv, fd.dv, impl.info().name + " dv");
}

// The gradients of `r` against the oracle's within the gradient tolerance.
Comparison compare_with_oracle(const Problem& p, const BackwardResult& r,
                               const PrecisionTraits& traits) {
  const OracleResult o = oracle(p);
  const GradTolerances t = grad_tolerances(p, o, traits);
  EXPECT_EQ(t.ill_conditioned_rows, 0);
  Comparison c;
  c.add("dq", {p.batch, p.heads, p.tq, p.dk}, r.dq, o.dq, t.dq);
  c.add("dk", {p.batch, p.kv_heads, p.tk, p.dk}, r.dk, o.dk, t.dk);
  c.add("dv", {p.batch, p.kv_heads, p.tk, p.dv}, r.dv, o.dv, t.dv);
  return c;
}

std::shared_ptr<const Implementation> impl(const std::string& name) {
  auto i = find_impl(name);
  if (!i) throw std::runtime_error("no implementation " + name);
  return i;
}

TEST(Backward, LoopF64MatchesFiniteDifferences) {
  for (const Problem& p : loop_problems()) expect_matches_finite_differences(*impl("loop_f64"), p);
}

TEST(Backward, BatchedF64MatchesFiniteDifferences) {
  for (const Problem& p : batched_problems()) {
    expect_matches_finite_differences(*impl("batched_f64"), p);
  }
}

TEST(Backward, ReferenceBackwardsMatchTheOracle) {
  for (const char* name : {"loop_f64", "batched_f64"}) {
    const auto i = impl(name);
    for (const Problem& p :
         std::string(name) == "loop_f64" ? loop_problems() : batched_problems()) {
      const BackwardResult r = i->backward(p);
      ASSERT_EQ(r.status, Status::ok) << r.error;
      const Comparison c = compare_with_oracle(p, r, i->info().precision);
      EXPECT_TRUE(c.ok()) << name << ": " << c.describe_failures();
      EXPECT_LT(c.max_budget_used, 0.5) << name;
    }
  }
}

TEST(Backward, EmptyRowsFollowThePolicy) {
  std::mt19937_64 rng(3);
  Problem p = random_problem(rng, DType::f64, 1, 2, 1, 2, 3, 2, 2);
  p.mask = Broadcast<uint8_t>{1, 2, {1, 1, 0, 1, 1, 1, /* h=1 */ 1, 0, 1, 0, 0, 0}};
  const BackwardResult err = impl("loop_f64")->backward(p);
  EXPECT_EQ(err.status, Status::error);
  EXPECT_NE(err.error.find("query (b=0, h=1, i=1)"), std::string::npos) << err.error;

  // The zero policy: the empty row's dQ is exactly 0, and it adds nothing
  // to dK / dV (the same as giving that row dO = 0).
  const BackwardResult zero = impls::loop_backward<double>(p, EmptyRowPolicy::zero);
  ASSERT_EQ(zero.status, Status::ok);
  for (int64_t d = 0; d < p.dk; ++d) EXPECT_EQ(zero.dq[row_index(p, 0, 1, 1) * 2 + size_t(d)], 0.0);
  Problem silent = p;
  for (int64_t d = 0; d < p.dv; ++d) silent.dout[out_index(p, 0, 1, 1, d)] = 0;
  const BackwardResult same = impls::loop_backward<double>(silent, EmptyRowPolicy::zero);
  EXPECT_EQ(zero.dk, same.dk);
  EXPECT_EQ(zero.dv, same.dv);
}

TEST(Backward, WrongSizedDoutIsAnError) {
  std::mt19937_64 rng(5);
  Problem p = random_problem(rng, DType::f64, 1, 1, 1, 2, 2, 1, 1);
  p.dout.pop_back();
  EXPECT_EQ(impl("loop_f64")->backward(p).status, Status::error);
  EXPECT_EQ(impl("batched_f64")->backward(p).status, Status::error);
}

TEST(Backward, ImplementationsWithoutBackwardAreUnsupported) {
  std::mt19937_64 rng(5);
  const Problem p = random_problem(rng, DType::f32, 1, 1, 1, 2, 2, 1, 1);
  EXPECT_EQ(impl("local_f32")->backward(p).status, Status::unsupported);
}

// --- The gradient tolerance on known inputs ---------------------------------

TEST(GradTolerance, KnownPassAndKnownFail) {
  const Problem p = loop_problems()[1];
  const OracleResult o = oracle(p);
  const GradTolerances t = grad_tolerances(p, o, impl("loop_f64")->info().precision);
  ASSERT_EQ(t.ill_conditioned_rows, 0);
  for (const auto* v : {&t.dq, &t.dk, &t.dv})
    for (double x : *v) {
      EXPECT_GT(x, 0);
      EXPECT_LT(x, 1e-13);  // a few hundred ulps of O(1) values
    }
  // The oracle's values move by 0.9 tolerance: pass; by 1.1: fail.
  for (double factor : {0.9, 1.1}) {
    BackwardResult r;
    r.dq = o.dq;
    r.dk = o.dk;
    r.dv = o.dv;
    r.dq[1] += factor * t.dq[1];
    r.dv[2] -= factor * t.dv[2];
    Comparison c;
    c.add("dq", {p.batch, p.heads, p.tq, p.dk}, r.dq, o.dq, t.dq);
    c.add("dv", {p.batch, p.kv_heads, p.tk, p.dv}, r.dv, o.dv, t.dv);
    EXPECT_EQ(c.ok(), factor < 1) << factor;
  }
}

TEST(GradTolerance, OneKeyGradientsAreTight) {
  // One key: a = 1, dS = a (dA - a dA) = 0 exactly, so dQ = dK = 0 and
  // dV = dO. Both bounds are a few hundred ulps of |dO| = 2 and of
  // sigma |dA| |k| = 2: the weight's forward bound (logit errors of a
  // score of 6, about 200 u) dominates, carried by |dO| into dV and by
  // |dA| into delta, dS and dQ.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 1, 1, 1);
  p.q.data = {3};
  p.k.data = {2};
  p.v.data = {0.5};
  p.dout = {2};
  p.scale = 1;
  const OracleResult o = oracle(p);
  const GradTolerances t = grad_tolerances(p, o, impl("loop_f64")->info().precision);
  EXPECT_EQ(o.dq[0], 0);
  EXPECT_EQ(o.dv[0], 2);
  constexpr double u = 0x1p-53;
  EXPECT_GT(t.dv[0], 100 * u * 2);
  EXPECT_LT(t.dv[0], 1000 * u * 2);
  EXPECT_GT(t.dq[0], 100 * u * 2);
  EXPECT_LT(t.dq[0], 1000 * u * 2);
  const BackwardResult r = impl("loop_f64")->backward(p);
  EXPECT_TRUE(compare_with_oracle(p, r, impl("loop_f64")->info().precision).ok());
}

TEST(GradTolerance, FloatGradientsFailTheDoubleBound) {
  // loop_backward<float> computes in f32: within the f32 traits' bound,
  // far outside the f64 one (a precision lie is caught).
  for (Problem p : loop_problems()) {
    const BackwardResult r = impls::loop_backward<float>(p, EmptyRowPolicy::error);
    ASSERT_EQ(r.status, Status::ok);
    const Comparison lie = compare_with_oracle(p, r, impls::one_pass_precision(DType::f64));
    EXPECT_FALSE(lie.ok());
    EXPECT_GT(lie.max_budget_used, 1e3);
  }
}

TEST(GradTolerance, BeyondFirstOrderIsFlagged) {
  // bf16 accumulation over 40 keys: gamma_40 = 40 * 2^-8 / (1 - ...) > 0.1.
  std::mt19937_64 rng(11);
  const Problem p = random_problem(rng, DType::bf16, 1, 1, 1, 2, 40, 2, 2);
  const GradTolerances t = grad_tolerances(p, oracle(p), impls::one_pass_precision(DType::bf16));
  EXPECT_EQ(t.ill_conditioned_rows, 2);
}

TEST(GradTolerance, NeedsDoutAndOracleGradients) {
  std::mt19937_64 rng(13);
  Problem p = random_problem(rng, DType::f64, 1, 1, 1, 2, 2, 1, 1);
  const OracleResult o = oracle(p);
  const PrecisionTraits traits = impls::one_pass_precision(DType::f64);
  EXPECT_NO_THROW(grad_tolerances(p, o, traits));
  OracleResult no_gradients = o;
  no_gradients.dq.clear();
  EXPECT_THROW(grad_tolerances(p, no_gradients, traits), std::invalid_argument);
  p.dout.clear();
  EXPECT_THROW(grad_tolerances(p, o, traits), std::invalid_argument);
}

// --- GradientsMatchOracle --------------------------------------------------

RunConfig config(int cases = 0) {
  RunConfig c;
  c.seed = kDefaultSeed;
  c.cases = cases;
  return c;
}

PropertyOutcome run(const Implementation& i, DType dtype, int cases = 0) {
  return run_property(*find_property("GradientsMatchOracle"), i, dtype, config(cases));
}

TEST(GradientsMatchOracle, PassesOnReferenceBackwards) {
  for (const char* name : {"loop_f64", "batched_f64"}) {
    const PropertyOutcome o = run(*impl(name), DType::f64, 500);
    EXPECT_EQ(o.status, PropertyStatus::passed) << name << "\n" << o.message;
    EXPECT_GT(o.cases, 450) << name;
    EXPECT_LT(o.max_budget_used, 0.5) << name;
  }
}

TEST(GradientsMatchOracle, PassesOnTheFloatLoopBackward) {
  // The kernel's f32 instantiation under f32 traits: validates the bound's
  // derivation in a second format.
  impls::FunctionImpl f32(
      impls::reference_info("loop_f32_backward", DType::f32,
                            impls::kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD,
                            EmptyRowPolicy::error, "test"),
      [](const Problem& p) { return impls::loop_forward<float>(p, EmptyRowPolicy::error); },
      [](const Problem& p) { return impls::loop_backward<float>(p, EmptyRowPolicy::error); });
  const PropertyOutcome o = run(f32, DType::f32, 500);
  EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
  EXPECT_LT(o.max_budget_used, 1.0);
}

TEST(GradientsMatchOracle, SkipsImplementationsWithoutBackward) {
  const PropertyOutcome o = run(*impl("local_f32"), DType::f32);
  EXPECT_EQ(o.status, PropertyStatus::skipped);
  EXPECT_FALSE(o.message.empty());
}

TEST(GradientsMatchOracle, SkipsABackwardWhoseQIsQuantizedInBlocks) {
  // The gradients' analysis charges Q's rounding as a unit roundoff, which
  // q8_0 has not (it once threw asking for one): skipped with the reason,
  // for the declaration's q_cast and for a path's.
  ImplInfo info = impls::reference_info("q8_q_backward", DType::f32,
                                        impls::kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD,
                                        EmptyRowPolicy::error, "test");
  const PropertyDef* prop = find_property_def("GradientsMatchOracle");
  ASSERT_NE(prop, nullptr);
  EXPECT_EQ(prop->skip_reason(info, DType::f32), std::nullopt);
  ImplInfo declared = info;
  declared.precision.q_cast = DType::q8_0;
  ImplInfo in_a_path = info;
  in_a_path.precision.q_cast = DType::f16;
  in_a_path.paths.push_back({"blocks", declared.precision});
  for (const ImplInfo& i : {declared, in_a_path}) {
    const auto why = prop->skip_reason(i, DType::f32);
    ASSERT_NE(why, std::nullopt);
    EXPECT_NE(why->find("q_cast q8_0"), std::string::npos) << *why;
  }
  impls::FunctionImpl f32(
      declared,
      [](const Problem& p) { return impls::loop_forward<float>(p, EmptyRowPolicy::error); },
      [](const Problem& p) { return impls::loop_backward<float>(p, EmptyRowPolicy::error); });
  EXPECT_EQ(run(f32, DType::f32, 20).status, PropertyStatus::skipped);
}

TEST(GradientsMatchOracle, FailsOnEveryBrokenBackward) {
  int broken = 0;
  for (const auto& i : registered_impls()) {
    if (i->info().kind != Kind::broken || i->info().caught_by != "GradientsMatchOracle") continue;
    ++broken;
    const PropertyOutcome o = run(*i, DType::f64);
    EXPECT_EQ(o.status, PropertyStatus::failed) << i->info().name << "\n" << o.message;
  }
  EXPECT_GE(broken, 2);
}

TEST(GradientsMatchOracle, CatchesAPrecisionLie) {
  // f32 arithmetic declared as f64.
  impls::FunctionImpl lie(
      impls::reference_info("f32_backward_as_f64", DType::f64,
                            impls::kLoopFeatures | ATTNCHECK_FEATURE_BACKWARD,
                            EmptyRowPolicy::error, "test"),
      [](const Problem& p) { return impls::loop_forward<double>(p, EmptyRowPolicy::error); },
      [](const Problem& p) { return impls::loop_backward<float>(p, EmptyRowPolicy::error); });
  EXPECT_EQ(run(lie, DType::f64).status, PropertyStatus::failed);
}

}  // namespace
}  // namespace attncheck
