// Tests of the generators: every value regime and constraint kind occurs
// often, generated problems are valid and never have an empty row (except
// where asked for), and shrinking reaches the simplest failing case.

#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include "attncheck/oracle.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"
#include "properties/gen/generators.h"
#include "properties/gen/real_size_shapes.h"
#include "run/real_sizes.h"

namespace attncheck {
namespace {

constexpr int kSamples = 3000;

// Draws kSamples problems at sizes spread over [0, 100), as a run does.
template <typename Check>
void sample(const gen::GenSpec& spec, bool empty_rows, Check check) {
  rc::Random random(12345);
  const auto g = empty_rows ? gen::problem_with_empty_row(spec) : gen::problem(spec);
  for (int k = 0; k < kSamples; ++k) {
    rc::Random r = random.split();
    check(g(r, k % 100).value());
  }
}

gen::GenSpec full_spec(DType dtype = DType::f64) {
  return gen::spec_for(find_impl("loop_f64")->info(), dtype);
}

TEST(Generator, EveryRegimeAndConstraintKindOccursInAtLeastFivePercent) {
  gen::Coverage coverage;
  {
    gen::CoverageScope scope(coverage);
    sample(full_spec(), false, [](const Problem&) {});
  }
  ASSERT_EQ(coverage.problems, kSamples);
  for (const char* regime : {"small_int", "dyadic", "normal", "large", "huge", "one_hot",
                             "all_equal", "near_tied"}) {
    const auto n = coverage.counts[std::string("regime ") + regime];
    std::cout << "regime " << regime << ": " << 100.0 * n / coverage.tensors << "% of tensors\n";
    EXPECT_GE(n, coverage.tensors / 20) << regime;
  }
  for (const char* kind :
       {"constraints none", "constraints key_padding", "constraints mask",
        "constraints causal_top_left", "constraints causal_bottom_right", "constraints window",
        "bias", "softcap", "strided", "gqa", "tq != tk", "tq = 1", "batch != heads"}) {
    const auto n = coverage.counts[kind];
    std::cout << kind << ": " << 100.0 * n / coverage.problems << "% of problems\n";
    EXPECT_GE(n, coverage.problems / 20) << kind;
  }
}

// A declared key block beyond the small sizes (online_f32's 64) is crossed
// in the small draws, without the real-size phase: one draw in eight takes
// tk in [65, 129]. Of 3000 draws the count is Binomial(3000, 1/8), mean
// 375 and sd 18.1; 260 is 6.3 sd below the mean, a false alarm under 1e-9
// (the draws are seeded besides). An implementation without key blocks
// never gets the long rows.
TEST(Generator, SmallDrawsCrossADeclaredKeyBlock) {
  const gen::GenSpec spec = gen::spec_for(find_impl("online_f32")->info(), DType::f32);
  ASSERT_EQ(spec.key_block, 64);
  gen::Coverage coverage;
  int64_t longest = 0;
  {
    gen::CoverageScope scope(coverage);
    sample(spec, false, [&](const Problem& p) { longest = std::max(longest, p.tk); });
  }
  const int64_t crossed = coverage.counts["tk above key_block"];
  std::cout << "tk above key_block 64: " << crossed << " of " << coverage.problems
            << " problems; longest tk " << longest << "\n";
  EXPECT_GE(crossed, 260);
  EXPECT_LE(longest, 2 * 64 + 1);
  EXPECT_GT(longest, 100);
  gen::Coverage plain;
  {
    gen::CoverageScope scope(plain);
    sample(full_spec(), false, [](const Problem& p) { EXPECT_LE(p.tk, 9); });
  }
  EXPECT_EQ(plain.counts.count("tk above key_block"), 0u);
}

// Scores sigma q.k of slice (b, h), row i, keys [0, tk).
std::vector<double> row_scores(const Problem& p, int64_t b, int64_t h, int64_t i) {
  std::vector<double> s(static_cast<size_t>(p.tk));
  for (int64_t j = 0; j < p.tk; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < p.dk; ++d) dot += p.q.at(b, h, i, d) * p.k.at(b, p.kv_head(h), j, d);
    s[static_cast<size_t>(j)] = p.scale * dot;
  }
  return s;
}

TEST(Generator, EachValueRegimeAtSizeHasTheScoresAndValuesItNames) {
  // SPEC 3's value regimes at real sizes (generators.h: SizeRegime), on
  // 20 seeds each, every row of every slice, in the formats of f32 and
  // f16 implementations (fp8 rounding is allowed for in the bounds).
  for (const char* impl : {"loop_f32", "online_f16"}) {
    const ImplInfo& info = find_impl(impl)->info();
    const DType dtype = info.supports(DType::f32) ? DType::f32 : DType::f16;
    for (int r = 1; r < gen::kSizeRegimes; ++r) {
      const auto regime = static_cast<gen::SizeRegime>(r);
      gen::GenSpec spec = gen::spec_for(info, dtype);
      spec.features = 0;
      gen::SizeShape shape;
      shape.batch = 2;
      shape.heads = 2;
      shape.kv_heads = 2;
      shape.tq = 3;
      shape.tk = 300;
      shape.dk = 64;
      shape.dv = 8;
      shape.regime = regime;
      spec.size = shape;
      rc::Random random(7);
      const auto g = gen::problem(spec);
      for (int k = 0; k < 20; ++k) {
        rc::Random rr = random.split();
        const Problem p = g(rr, 100).value();
        for (double x : p.q.data) ASSERT_EQ(x, round_to(dtype, x));
        for (double x : p.v.data) ASSERT_TRUE(std::isfinite(x));
        for (int64_t b = 0; b < p.batch; ++b)
          for (int64_t h = 0; h < p.heads; ++h) {
            for (int64_t i = 0; i < p.tq; ++i) {
              std::vector<double> s = row_scores(p, b, h, i);
              std::sort(s.begin(), s.end());
              const std::string where = fmt::format("{} {} b {} h {} i {}", impl,
                                                    gen::size_regime_name(regime), b, h, i);
              if (regime == gen::SizeRegime::near_flat || regime == gen::SizeRegime::large) {
                EXPECT_LT(s.back() - s.front(), 0.25) << where;
              }
              if (regime == gen::SizeRegime::far_below) {
                EXPECT_LT(s.back(), -100) << where;
                EXPECT_GT(s.front(), -240) << where;
              }
              if (regime == gen::SizeRegime::dominant_key) {  // past f32's exp overflow
                EXPECT_GT(s.back() - s[s.size() - 2], 88.7) << where;
              }
            }
            if (regime == gen::SizeRegime::large) {
              // Unnormalised sums over the keys: in range of the narrowest
              // of pv_accum, v's and the output's formats, within 16x of it.
              const double range = std::min(spec.pv_range, max_finite(dtype));
              for (int64_t d = 0; d < p.dv; ++d) {
                double sum = 0;
                for (int64_t j = 0; j < p.tk; ++j) sum += std::fabs(p.v.at(b, p.kv_head(h), j, d));
                EXPECT_LT(sum, range) << impl;
                EXPECT_GE(sum, range / 16) << impl;
              }
            }
          }
      }
    }
  }
}

TEST(Generator, ProblemsAreValidWithinFeaturesAndNeverHaveEmptyRows) {
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    sample(full_spec(dtype), false, [&](const Problem& p) {
      ASSERT_NO_THROW(p.validate());
      ASSERT_FALSE(p.has_empty_rows());
      ASSERT_EQ(p.dtype, dtype);
    });
  }
  // Without features, nothing but plain attention is drawn.
  gen::GenSpec plain = full_spec();
  plain.features = 0;
  sample(plain, false, [](const Problem& p) {
    EXPECT_TRUE(p.key_valid.empty() && !p.mask && !p.bias && !p.causal);
    EXPECT_EQ(p.window_left, -1);
    EXPECT_EQ(p.softcap, 0.0);
    EXPECT_EQ(p.kv_heads, p.heads);
    EXPECT_EQ(p.scale, Problem::default_scale(p.dk));
    EXPECT_EQ(p.q.strides, contiguous_strides(p.batch, p.heads, p.tq, p.dk));
  });
}

TEST(Generator, LimitsAreRespected) {
  gen::GenSpec spec = full_spec();
  spec.limits.dk_min = 2;
  spec.limits.dk_multiple = 2;
  spec.limits.dk_max = 4;
  spec.limits.dv_equals_dk = true;
  spec.limits.max_tq = 3;
  sample(spec, false, [](const Problem& p) {
    EXPECT_TRUE(p.dk == 2 || p.dk == 4) << p.dk;
    EXPECT_EQ(p.dv, p.dk);
    EXPECT_LE(p.tq, 3);
  });
}

// An f32 kernel that stores its scores in bf16 (s_cast): the
// generator keeps q and k small enough that most problems stay within the
// first-order analysis; unaware of the storage, its large regime alone makes
// far more of them ill-conditioned.
TEST(Generator, ScoresStoredInACoarseFormatStayMostlyJudgeable) {
  ImplInfo info = find_impl("loop_f32")->info();
  info.precision.s_cast = DType::bf16;
  const gen::GenSpec spec = gen::spec_for(info, DType::f32);
  ASSERT_EQ(spec.score_storage, DType::bf16);
  gen::GenSpec unaware = spec;
  unaware.score_storage.reset();
  const auto ill_fraction = [&](const gen::GenSpec& s) {
    int ill = 0, n = 0;
    rc::Random random(12345);
    const auto g = gen::problem(s);
    for (int k = 0; k < 400; ++k) {
      rc::Random r = random.split();
      const Problem p = g(r, k % 100).value();
      ill += tolerances(p, oracle(p), info.precision).ill_conditioned_rows > 0;
      ++n;
    }
    return static_cast<double>(ill) / n;
  };
  const double aware = ill_fraction(spec), blind = ill_fraction(unaware);
  std::cout << "ill-conditioned: " << 100 * aware << "% of problems, " << 100 * blind
            << "% without score_storage\n";
  EXPECT_LT(aware, 0.25);
  EXPECT_GT(blind, aware + 0.05);
}

TEST(Generator, EmptyRowProblemsAlwaysHaveOne) {
  sample(full_spec(), true, [](const Problem& p) {
    ASSERT_NO_THROW(p.validate());
    ASSERT_TRUE(p.has_empty_rows());
  });
}

// A property that fails as soon as two keys differ must shrink to the
// smallest such problem: one query, two keys, dk = 1, values 0 and +-1.
TEST(Generator, ShrinksToTheSimplestCounterexample) {
  gen::GenSpec spec = full_spec();
  Problem last;
  // A fixed seed, quiet. RapidCheck's default is a new seed every run, and
  // its greedy shrinking can stop at a local minimum (seed
  // 3759944160275326999 ends at dk = 2, the keys differing in the second
  // component): that failed a clean-clone run. Seeds 1 to 20 all reach
  // the simplest case.
  rc::detail::TestParams params;
  params.seed = 1;
  rc::detail::TestListenerAdapter listener;
  const auto result = rc::detail::checkTestable([&] {
    const Problem p = *gen::problem(spec);
    bool differ = false;
    for (int64_t j = 1; j < p.tk; ++j)
      for (int64_t d = 0; d < p.dk; ++d) differ = differ || p.k.at(0, 0, j, d) != p.k.at(0, 0, 0, d);
    if (differ) {
      last = p;
      RC_FAIL("keys differ");
    }
  }, rc::detail::TestMetadata{}, params, listener);
  ASSERT_TRUE(result.template is<rc::detail::FailureResult>());
  EXPECT_EQ(last.batch, 1);
  EXPECT_EQ(last.heads, 1);
  EXPECT_EQ(last.tq, 1);
  EXPECT_EQ(last.tk, 2);
  EXPECT_EQ(last.dk, 1);
  EXPECT_EQ(last.dv, 1);
  EXPECT_FALSE(last.mask.has_value());
  EXPECT_TRUE(last.key_valid.empty());
  // One key 0, the other a signed power of two (1 for small integers,
  // 2^-6 for the dyadic grid).
  const double a = last.k.at(0, 0, 0, 0), b = last.k.at(0, 0, 1, 0);
  const double nonzero = std::fabs(a) + std::fabs(b);
  EXPECT_TRUE(a == 0 || b == 0) << a << " " << b;
  int e = 0;
  EXPECT_EQ(std::frexp(nonzero, &e), 0.5) << a << " " << b;
}

// The shapes MatchesOracle judges under ci before its random draws.
std::vector<gen::SizeShape> all_fixed_shapes() {
  std::vector<gen::SizeShape> v = gen::fixed_real_shapes(Profile::ci);
  for (const auto& s : gen::structural_real_shapes()) v.push_back(s);
  return v;
}

// SPEC 3's covering set at real sizes: the fixed list every profile runs,
// fitted to each correct built-in's features, limits and cost cap (the
// shapes MatchesOracle judges), holds each declared structure: key
// padding, an explicit mask, causal both ways (top-left over several
// 64-query tiles where the cap allows), a window whose left edge is inside
// a block of 16, bias, softcap with a mask and without any (over a whole
// query tile), and no mask at all; and, for a built-in that takes any
// head dim at the plain cap, each of SPEC 3's head dims.
TEST(RealSizes, FixedListCoversEveryDeclaredStructureOfEveryBuiltIn) {
  int checked = 0, head_dims_checked = 0;
  for (const auto& impl : registered_impls()) {
    const ImplInfo& info = impl->info();
    if (info.kind == Kind::broken) continue;
    SCOPED_TRACE(info.name);
    DType dtype = DType::f64;
    for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16})
      if (info.supports(d)) {
        dtype = d;
        break;
      }
    const gen::GenSpec spec = gen::spec_for(info, dtype, Profile::ci);
    const int64_t weight = gen::reference_weight(info);
    std::vector<gen::SizeShape> shapes;
    for (const auto& s : all_fixed_shapes())
      shapes.push_back(gen::fit_shape(s, spec, gen::size_cost_cap(Profile::ci), weight));
    const auto has = [&](Features bit) { return (spec.features & bit) != 0; };
    const auto any = [&](const auto& pred) { return std::any_of(shapes.begin(), shapes.end(), pred); };
    const auto unmasked = [](const gen::SizeShape& s) {
      return !s.key_padding && !s.explicit_mask && !s.causal && !s.windowed();
    };
    const int64_t one_tile = info.limits.max_tq > 0 ? std::min<int64_t>(64, info.limits.max_tq) : 64;
    EXPECT_TRUE(any(unmasked));
    if (has(ATTNCHECK_FEATURE_KEY_VALID)) {
      EXPECT_TRUE(any([](auto& s) { return s.key_padding; }));
    }
    if (has(ATTNCHECK_FEATURE_MASK)) {
      EXPECT_TRUE(any([](auto& s) { return s.explicit_mask; }));
    }
    if (has(ATTNCHECK_FEATURE_BIAS)) {
      EXPECT_TRUE(any([](auto& s) { return s.bias; }));
    }
    for (Align a : {Align::top_left, Align::bottom_right}) {
      const Features bit = a == Align::top_left ? ATTNCHECK_FEATURE_ALIGN_TOP_LEFT
                                                : ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT;
      if (!has(ATTNCHECK_FEATURE_CAUSAL) || !has(bit)) continue;
      EXPECT_TRUE(any([&](auto& s) { return s.causal && s.align == a && s.tq > 1; }))
          << static_cast<int>(a);
    }
    if (has(ATTNCHECK_FEATURE_CAUSAL) && has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT) && weight == 1 &&
        info.limits.max_tq == 0) {  // several query tiles, where the cap allows
      EXPECT_TRUE(any([](auto& s) { return s.causal && s.align == Align::top_left && s.tq > 128; }));
    }
    if (has(ATTNCHECK_FEATURE_WINDOW)) {
      EXPECT_TRUE(any([](auto& s) {
        return s.window_left > 0 && s.window_left % 16 != 0 && s.tk > 64;
      }));
    }
    if (has(ATTNCHECK_FEATURE_SOFTCAP)) {
      EXPECT_TRUE(any([&](auto& s) { return s.softcap > 0 && unmasked(s) && s.tq >= one_tile; }));
      EXPECT_TRUE(any([&](auto& s) { return s.softcap > 0 && !unmasked(s); }));
    }
    // SPEC 3's head dims, where the implementation takes any head dim and
    // the cap is the plain one (the certified oracle's weight shrinks dims).
    if (weight == 1 && info.limits.dk_max == 0 && info.limits.dk_min <= 32 &&
        info.limits.dk_multiple <= 1) {
      for (int64_t d : {32, 40, 64, 72, 80, 96, 112, 128, 160, 192, 256, 59, 65, 111, 129}) {
        EXPECT_TRUE(any([&](auto& s) { return s.dk == d; })) << "dk " << d;
      }
      if (!info.limits.dv_equals_dk) {
        EXPECT_TRUE(any([&](auto& s) { return s.dk == 192 && s.dv == 128; }));
      }
      ++head_dims_checked;
    }
    // Issue 51's shape classes: GQA groups of 1, 2, 4, 8 and 16 over
    // several K/V heads, a window that skips key block 0 with a sink and
    // one without, speculative decoding and decode past 2048 keys.
    // Under the certified oracle's weight the cap keeps two K/V heads for
    // the groups of 8 and 16 (the covering set's own shapes), not for 8/2.
    if (has(ATTNCHECK_FEATURE_GQA) && info.limits.max_batch_heads == 0) {
      for (int64_t group : weight == 1 ? std::vector<int64_t>{1, 2, 4, 8, 16}
                                       : std::vector<int64_t>{8, 16}) {
        EXPECT_TRUE(any([&](auto& s) { return s.kv_heads >= 2 && s.heads == group * s.kv_heads; }))
            << "group " << group;
      }
    }
    if (has(ATTNCHECK_FEATURE_WINDOW) && has(ATTNCHECK_FEATURE_CAUSAL) &&
        has(ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT) && info.limits.max_tk == 0) {
      for (int sink : {0, 1}) {
        EXPECT_TRUE(any([&](auto& s) {
          return s.sink == sink && s.windowed() && s.tk - s.tq - s.window_left >= 64;
        })) << "sink " << sink;
      }
    }
    if (has(ATTNCHECK_FEATURE_CAUSAL) && has(ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT) &&
        info.limits.max_tk == 0 && info.limits.max_tq == 0 && weight == 1) {
      EXPECT_TRUE(any([](auto& s) {
        return s.causal && s.align == Align::bottom_right && s.tq > 1 && s.tq < 8 && s.tk > 1024;
      }));
    }
    if (info.limits.max_tk == 0) {
      EXPECT_TRUE(any([](auto& s) { return s.tq == 1 && s.tk > 2048; }));
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
  EXPECT_GT(head_dims_checked, 5);
}

// The covering rule (issue 51): in every run, MatchesOracle's real-size
// shapes hold each on/off combination of every pair of structural
// features the implementation declares, whatever fitting to its limits
// left of the fixed and structural lists, under both profiles and at any
// seed; the lists alone leave some pairs uncovered (the rule adds shapes).
TEST(RealSizes, EveryPairOfDeclaredFeaturesIsCoveredInEveryRun) {
  int checked = 0, needed_the_rule = 0;
  for (const auto& impl : registered_impls()) {
    const ImplInfo& info = impl->info();
    if (info.kind == Kind::broken) continue;
    SCOPED_TRACE(info.name);
    for (const DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      if (!info.supports(dtype)) continue;
      for (const Profile profile : {Profile::ci, Profile::thorough}) {
        const gen::GenSpec spec = gen::spec_for(info, dtype, profile);
        const int64_t weight = gen::reference_weight(info);
        for (const uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
          const auto shapes = planned_real_shapes("MatchesOracle", AtSize::all, profile, spec,
                                                  weight, seed);
          const auto left = gen::uncovered_pairs(shapes, spec);
          EXPECT_TRUE(left.empty()) << dtype_name(dtype) << " " << static_cast<int>(profile) << " seed "
                                    << seed << ": " << fmt::format("{}", fmt::join(left, "; "));
        }
        std::vector<gen::SizeShape> lists;
        for (const auto& s : all_fixed_shapes()) {
          gen::SizeShape f = gen::fit_shape(s, spec, gen::size_cost_cap(profile), weight);
          f.variant = static_cast<int64_t>(lists.size());
          lists.push_back(f);
        }
        if (!gen::uncovered_pairs(lists, spec).empty()) ++needed_the_rule;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
  EXPECT_GT(needed_the_rule, 0) << "the fixed lists cover every pair: the rule is never tested";
}

// A draw at each structural shape carries it into the problem, and the
// random shapes take every structure.
TEST(RealSizes, DrawsCarryTheShapesStructure) {
  const gen::GenSpec base = full_spec();
  gen::Coverage coverage;
  {
    gen::CoverageScope scope(coverage);
    rc::Random random(777);
    for (const auto& s : all_fixed_shapes()) {
      gen::GenSpec spec = base;
      spec.size = gen::fit_shape(s, base, gen::size_cost_cap(Profile::ci), 1);
      rc::Random r = random.split();
      const Problem p = gen::problem(spec)(r, 0).value();
      ASSERT_NO_THROW(p.validate());
      EXPECT_FALSE(p.has_empty_rows());
      EXPECT_EQ(p.window_left, spec.size->window_left) << s.label;
      EXPECT_EQ(p.window_right, spec.size->window_right) << s.label;
      EXPECT_EQ(p.mask.has_value(), spec.size->explicit_mask) << s.label;
      EXPECT_EQ(p.bias.has_value(), spec.size->bias) << s.label;
      EXPECT_EQ(p.softcap, spec.size->softcap) << s.label;
      if (spec.size->windowed()) {
        EXPECT_EQ(p.align, spec.size->align) << s.label;
      }
    }
  }
  for (const char* kind : {"real size window", "real size causal_top_left",
                           "real size causal_bottom_right", "real size mask",
                           "real size key_padding", "real size bias",
                           "real size softcap with a mask", "real size softcap, no mask"}) {
    EXPECT_GE(coverage.counts[kind], 1) << kind;
  }
  std::map<std::string, int> random_kinds;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const gen::SizeShape s = gen::random_real_shape(Profile::ci, seed);
    if (s.windowed()) {
      ++random_kinds["window"];
      EXPECT_NE(s.window_left % 16, 0);
    }
    if (s.causal) ++random_kinds[s.align == Align::top_left ? "causal top-left" : "causal bottom-right"];
    if (s.explicit_mask) ++random_kinds["mask"];
    if (s.bias) ++random_kinds["bias"];
    if (s.softcap > 0) ++random_kinds[s.explicit_mask ? "softcap, mask" : "softcap"];
  }
  for (const char* kind : {"window", "causal top-left", "causal bottom-right", "mask", "bias",
                           "softcap, mask", "softcap"}) {
    EXPECT_GE(random_kinds[kind], 5) << kind;
  }
}

}  // namespace
}  // namespace attncheck
