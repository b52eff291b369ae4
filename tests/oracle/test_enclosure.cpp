// The enclosure (oracle/enclosure.cpp, SPEC 4's double tier for real
// sizes) must contain the certified value, always: on generated problems of
// every version 1 feature it takes (everything but softcap and gradients)
// and every value regime, at small sizes and at real-size shapes; and its
// exp must stay within its stated error.

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "properties/gen/generators.h"
#include "attncheck/oracle.h"
#include "attncheck/plugin.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

// Every value the certified oracle decided lies within value +- radius.
void expect_contains(const OracleResult& e, const OracleResult& o, const std::string& what) {
  ASSERT_EQ(e.tier, OracleResult::Tier::enclosure);
  const auto check = [&](const char* name, const std::vector<double>& mid,
                         const std::vector<double>& radius, const std::vector<double>& exact) {
    ASSERT_EQ(mid.size(), exact.size());
    ASSERT_EQ(radius.size(), exact.size());
    for (size_t k = 0; k < exact.size(); ++k) {
      if (mid[k] == exact[k]) continue;  // exact elements, -inf lse
      // The certified value is the correctly rounded one: the exact value
      // is within half an ulp of it, which the check allows.
      const double half_ulp = std::fabs(exact[k]) * 0x1p-53;
      EXPECT_LE(std::fabs(mid[k] - exact[k]), radius[k] + half_ulp)
          << what << ": " << name << "[" << k << "] enclosure " << mid[k] << " +- " << radius[k]
          << ", certified " << exact[k];
    }
  };
  check("out", e.out, e.out_radius, o.out);
  check("weights", e.weights, e.weights_radius, o.weights);
  check("lse", e.lse, e.lse_radius, o.lse);
  EXPECT_EQ(e.row_empty, o.row_empty) << what;
  EXPECT_EQ(e.row_allowed, o.row_allowed) << what;
}

constexpr Features kEnclosed =
    (ATTNCHECK_FEATURE_NONDETERMINISTIC - 1) & ~ATTNCHECK_FEATURE_SOFTCAP &
    ~ATTNCHECK_FEATURE_BACKWARD;

TEST(Enclosure, ContainsTheCertifiedValueOnGeneratedProblems) {
  int problems = 0;
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    gen::GenSpec spec;
    spec.dtype = dtype;
    spec.features = kEnclosed;
    spec.max_t = 19;
    spec.max_d = 9;
    const auto g = gen::problem(spec);
    const auto g_empty = gen::problem_with_empty_row(spec);
    rc::Random random(20261130 + static_cast<uint64_t>(dtype));
    for (int k = 0; k < 150; ++k) {
      rc::Random rr = random.split();
      const Problem p = (k % 5 == 4 ? g_empty : g)(rr, k % 100).value();
      const OracleResult o = oracle(p);
      if (!o.uncertified.empty()) continue;
      expect_contains(enclose(p), o, fmt::format("{} problem {}", dtype_name(dtype), k));
      ++problems;
    }
  }
  EXPECT_GT(problems, 500);
}

TEST(Enclosure, ContainsTheCertifiedValueWithSinksDescalesAndFp8Inputs) {
  // E4M3 stored values (at most four significant bits), descales that are
  // not doubles' exact factors, sinks above, among and below the scores,
  // and (causal, bottom-right with tq > tk) sink-only rows.
  static const double kValues[] = {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 0.375, 3, 448};
  std::mt19937 rng(20261130);
  int problems = 0, tight = 0, elements = 0;
  for (int k = 0; k < 60; ++k) {
    const int64_t tq = 1 + static_cast<int64_t>(rng() % 9), tk = 1 + static_cast<int64_t>(rng() % 9);
    Problem p = Problem::zeros(DType::f32, 2, 2, 1, tq, tk, 4, 3);
    p.q_dtype = p.kv_dtype = DType::e4m3;
    for (auto* t : {&p.q.data, &p.k.data, &p.v.data})
      for (double& x : *t) x = (rng() % 2 ? -1 : 1) * kValues[rng() % (k % 3 == 0 ? 12 : 10)];
    p.sink = {static_cast<double>(static_cast<int>(rng() % 17) - 8) / 2, -30};
    if (k % 4 != 3) p.descale = Descales{0.1, k % 2 ? 3.0 : 0.015625, 0.7};
    p.causal = k % 3 == 1;
    p.align = Align::bottom_right;
    p.validate();
    const OracleResult o = oracle(p);
    if (!o.uncertified.empty()) continue;
    const OracleResult e = enclose(p);
    expect_contains(e, o, fmt::format("serving problem {}", k));
    // Tight against the values' scale (|o| may cancel): max |v| vd <= 2 * 0.7.
    for (size_t x = 0; x < e.out.size(); ++x) tight += e.out_radius[x] <= 1e-12 ? 1 : 0;
    elements += static_cast<int>(e.out.size());
    // Sink-only rows are exact.
    for (size_t row = 0; row < o.lse.size(); ++row) {
      if (o.row_allowed[row] != 0) continue;
      EXPECT_EQ(e.lse[row], o.lse[row]);
      EXPECT_EQ(e.lse_radius[row], 0.0);
    }
    ++problems;
  }
  EXPECT_GT(problems, 50);
  // Most radii are double-sized, not infinite fallbacks (a third of the
  // problems hold E4M3's largest values, 3 and 448, whose scores are beyond
  // the enclosure's first-order range: those rows fall back).
  EXPECT_GT(tight, elements / 2);
  // Varlen problems stay with the certified oracle.
  Problem packed = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 1, 1);
  packed.packed = PackedSeqs{{0, 1}, {}};
  packed.q.strides = {0, 1, 1, 1};
  EXPECT_TRUE(enclosure_unsupported(packed).has_value());
}

TEST(Enclosure, ContainsTheCertifiedValueAtRealSizeShapes) {
  // The fixed shapes, fitted to a cap the certified oracle affords.
  gen::GenSpec spec;
  spec.dtype = DType::f32;
  spec.features = kEnclosed;
  int k = 0;
  for (const gen::SizeShape& s : gen::fixed_real_shapes(Profile::ci)) {
    gen::GenSpec at = spec;
    at.size = gen::fit_shape(s, spec, int64_t{1} << 19, 1);
    rc::Random random(77 + static_cast<uint64_t>(k++));
    const Problem p = gen::problem(at)(random, 100).value();
    const OracleResult o = oracle(p);
    if (!o.uncertified.empty()) continue;
    expect_contains(enclose(p), o, s.label);
  }
}

TEST(Enclosure, IsNarrowForSinglePrecisionTolerances) {
  // Real-size f32 data: the radius is dominated by the bounded exp's 2^-40
  // times sum a_j |v_j|, far below 1/100 of an f32 tolerance (which has
  // gamma_n u_a sum a_j |v_j| among its terms).
  gen::GenSpec spec;
  spec.dtype = DType::f32;
  spec.features = kEnclosed;
  gen::SizeShape s;
  s.heads = 2;
  s.tq = 33;
  s.tk = 1025;
  s.dk = s.dv = 128;
  spec.size = s;
  rc::Random random(5);
  const Problem p = gen::problem(spec)(random, 100).value();
  const OracleResult e = enclose(p);
  PrecisionTraits f32;
  f32.accum = f32.p_cast = DType::f32;
  const Tolerances t = tolerances(p, e, f32);
  for (size_t k = 0; k < e.out.size(); ++k) EXPECT_LE(e.out_radius[k] * 100, t.out[k]) << k;
  for (size_t k = 0; k < e.lse.size(); ++k) EXPECT_LE(e.lse_radius[k] * 100, t.lse[k]) << k;
}

TEST(Enclosure, RefusesWhatItDoesNotCover) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 2, 2, 2, 2);
  EXPECT_FALSE(enclosure_unsupported(p));
  p.softcap = 5;
  EXPECT_TRUE(enclosure_unsupported(p));
  p.softcap = 0;
  p.dout.assign(4, 1.0);
  EXPECT_TRUE(enclosure_unsupported(p));
}

TEST(BoundedExp, StaysWithinItsStatedError) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> wide(-745, 709), near(-2, 2);
  for (int k = 0; k < 200000; ++k) {
    const double x = k % 2 ? wide(rng) : near(rng);
    const long double exact = expl(static_cast<long double>(x));
    const double got = bounded_exp(x);
    const long double err = fabsl(static_cast<long double>(got) - exact);
    EXPECT_LE(err, kBoundedExpError * exact + 0x1p-1074) << x;
    if (err > kBoundedExpError * exact + 0x1p-1074) break;
  }
  EXPECT_EQ(bounded_exp(0), 1.0);
  EXPECT_EQ(bounded_exp(-800), 0.0);
}

}  // namespace
}  // namespace attncheck
