// The property suite judged on known implementations: every property passes
// on every correct implementation, and every broken implementation is caught
// by the property it was made for. A property that cannot fail is a defect.

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "attncheck/fixture.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "properties/case_context.h"
#include "properties/gen/generators.h"
#include "run/real_sizes.h"
#include "tests/impls/size_dependent_twins.h"

namespace attncheck {
namespace {

RunConfig ci_config() {
  RunConfig c;
  c.seed = kDefaultSeed;
  return c;
}

struct Case {
  std::string impl, property;
  DType dtype;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string s = info.param.impl + "_" + std::string(dtype_name(info.param.dtype)) + "_" +
                  info.param.property;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

std::vector<Case> correct_cases() {
  std::vector<Case> cases;
  for (const auto& impl : registered_impls()) {
    if (impl->info().kind == Kind::broken) continue;
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      if (!impl->info().supports_output(d)) continue;
      for (const PropertyDef& p : property_defs()) cases.push_back({impl->info().name, p.name, d});
    }
  }
  return cases;
}

std::vector<Case> broken_cases() {
  std::vector<Case> cases;
  for (const auto& impl : registered_impls()) {
    const ImplInfo& info = impl->info();
    if (info.kind != Kind::broken) continue;
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16})
      if (info.supports_output(d)) cases.push_back({info.name, info.caught_by, d});
  }
  return cases;
}

PropertyOutcome run(const Case& c, const RunConfig& config = ci_config()) {
  const auto impl = find_impl(c.impl);
  const PropertyDef* prop = find_property_def(c.property);
  if (!impl || !prop) throw std::runtime_error("unknown " + c.impl + " or " + c.property);
  return run_property(*prop, *impl, c.dtype, config);
}

class CorrectImplementation : public testing::TestWithParam<Case> {};

// ATTNCHECK_TEST_CASES=N runs each correct implementation's properties
// with N cases instead of the profile's: ci/test's sanitizer stage (25),
// which looks for memory errors and undefined behaviour on the code paths
// the cases take, at a quarter of the instrumented cost; the verdicts at
// the CI profile's budget are build/'s.
RunConfig correct_config() {
  RunConfig c = ci_config();
  if (const char* n = std::getenv("ATTNCHECK_TEST_CASES"); n && *n) c.cases = std::stoi(n);
  return c;
}

TEST_P(CorrectImplementation, PassesOrIsSkippedWithReason) {
  const PropertyOutcome o = run(GetParam(), correct_config());
  std::cout << status_name(o.status) << ": " << o.message << "\n";
  ASSERT_TRUE(o.status == PropertyStatus::passed || o.status == PropertyStatus::skipped)
      << status_name(o.status) << "\n" << o.message;
  if (o.status == PropertyStatus::skipped) {
    EXPECT_FALSE(o.message.empty());
  } else {
    EXPECT_GT(o.cases, 0);
    EXPECT_LE(o.max_budget_used, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Suite, CorrectImplementation, testing::ValuesIn(correct_cases()),
                         case_name);

class BrokenImplementation : public testing::TestWithParam<Case> {};

TEST_P(BrokenImplementation, IsCaughtByItsProperty) {
  ASSERT_NE(find_property(GetParam().property), nullptr)
      << GetParam().impl << " names an unknown property " << GetParam().property;
  if (test_support::caught_only_at_real_size(GetParam().impl) && !real_sizes_enabled()) {
    GTEST_SKIP() << "caught only at real sizes, and ATTNCHECK_REAL_SIZES=0";
  }
  const PropertyOutcome o = run(GetParam());
  std::cout << o.message << "\n";
  EXPECT_EQ(o.status, PropertyStatus::failed) << o.message;
  EXPECT_NE(o.message.find(GetParam().property), std::string::npos);
  EXPECT_NE(o.message.find(GetParam().impl), std::string::npos);
  EXPECT_NE(o.message.find(std::to_string(kDefaultSeed)), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Suite, BrokenImplementation, testing::ValuesIn(broken_cases()),
                         case_name);

// The version 1 properties on serving problems (SPEC 2): in their sink
// forms (the real keys' weights sum to 1 - a_sink, o = (1 - a_sink) v for
// equal values, the hull of the values and 0) a sink added to the
// numerator shows in each; CausalPrefixIndependence and WindowLocality per
// sequence see a packed batch aligned by its longest sequences.
std::vector<Case> serving_form_cases() {
  std::vector<Case> cases;
  for (const char* property :
       {"RowSumsToOne", "ConstantValuesReproduced", "OutputInConvexHull"})
    cases.push_back({"broken_sink_in_numerator", property, DType::f32});
  cases.push_back({"broken_packed_align_from_max", "CausalPrefixIndependence", DType::bf16});
  // WindowLocality per sequence: a window aligned by the packed maxima.
  cases.push_back({"broken_packed_align_from_max", "WindowLocality", DType::bf16});
  // ValueLinearity and KeyTranslationInvariance on paged problems: a page
  // tail or another sequence's page read keeps values and keys the
  // rewrites of the sequence's own keys do not move.
  for (const char* property : {"ValueLinearity", "KeyTranslationInvariance"}) {
    cases.push_back({"broken_paged_stale_tail", property, DType::f32});
    cases.push_back({"broken_block_table_global_index", property, DType::f32});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(ServingForms, BrokenImplementation, testing::ValuesIn(serving_form_cases()),
                         case_name);

TEST(Catalog, EveryPropertyHasABrokenImplementationMadeForIt) {
  for (const PropertyDef& p : property_defs()) {
    bool found = false;
    for (const Case& c : broken_cases()) found = found || c.property == p.name;
    EXPECT_TRUE(found) << p.name << " has no broken implementation";
  }
}

TEST(Catalog, FullFeatureReferencePassesEveryPropertyWithoutSkips) {
  for (const PropertyDef& p : property_defs()) {
    // MultiHeadConsistency is for layers: mha_f32 carries it.
    const Case c = p.name == "MultiHeadConsistency" ? Case{"mha_f32", p.name, DType::f32}
                                                    : Case{"loop_f64", p.name, DType::f64};
    const PropertyOutcome o = run(c);
    EXPECT_EQ(o.status, PropertyStatus::passed) << p.name << ": " << o.message;
  }
}

TEST(Catalog, NamesAreTheDocumentedOnesInOrder) {
  // The registry (each family file registers its properties at its SPEC
  // position) against docs/properties.md, where each property's paragraph
  // opens with its name in bold from its section "## The catalog" on, in
  // SPEC section 2's order: a property added without its docs, or at the
  // wrong place, fails here.
  std::ifstream in(std::string(ATTNCHECK_SOURCE_DIR) + "/docs/properties.md");
  ASSERT_TRUE(in) << "docs/properties.md";
  std::vector<std::string> documented;
  const std::regex opening(R"(^\*\*([A-Z][A-Za-z]+)(\.\*\*|\*\* \())");
  bool in_catalog = false;
  for (std::string line; std::getline(in, line);) {
    in_catalog = in_catalog || line == "## The catalog";
    std::smatch m;
    if (in_catalog && std::regex_search(line, m, opening)) documented.push_back(m[1]);
  }
  std::vector<std::string> names;
  for (const PropertyDef& p : property_defs()) names.push_back(p.name);
  EXPECT_EQ(names, documented);
}

TEST(Runner, ServingTwinsShrinkToTheirTriggers) {
  // cu_seqlens staged for 4 shrinks to 5 sequences on
  // small problems; the split-K/V twins are caught at real size with the
  // CI profile and the search ends at the split threshold (257 keys, 256
  // pass); the rescale twin at a second 16-key block (17).
  const PropertyOutcome staged =
      run({"broken_cu_seqlens_staged_for_4", "PackedEqualsSeparate", DType::f32});
  ASSERT_EQ(staged.status, PropertyStatus::failed) << staged.message;
  ASSERT_TRUE(staged.counterexample);
  EXPECT_EQ(staged.counterexample->batch, 5) << staged.message;
  if (!real_sizes_enabled()) GTEST_SKIP() << "the others only at real sizes, and ATTNCHECK_REAL_SIZES=0";
  for (const char* name : {"broken_split_sink_per_chunk", "broken_split_combine_drops_sink",
                           "broken_split_drops_descales", "broken_split_reads_max_seqlen_k"}) {
    const PropertyOutcome o = run({name, "MatchesOracle", DType::f32});
    ASSERT_EQ(o.status, PropertyStatus::failed) << name << "\n" << o.message;
    ASSERT_TRUE(o.counterexample) << name;
    EXPECT_EQ(o.counterexample->tk, 257) << name << "\n" << o.message;
  }
  const PropertyOutcome rescale = run({"broken_sink_lost_on_rescale", "MatchesOracle", DType::f32});
  ASSERT_EQ(rescale.status, PropertyStatus::failed) << rescale.message;
  ASSERT_TRUE(rescale.counterexample);
  EXPECT_EQ(rescale.counterexample->tk, 17) << rescale.message;
}

TEST(Runner, ShrinkingDropsSlicesTheFailureDoesNotNeed) {
  // The flush shows in one row of one head: RapidCheck's shrinking alone
  // kept batch 1, heads 2 around an all-zero head.
  const PropertyOutcome flush =
      run({"broken_exp_flushes_tiny", "ExtremeScoresStayFinite", DType::f64});
  ASSERT_EQ(flush.status, PropertyStatus::failed) << flush.message;
  ASSERT_TRUE(flush.counterexample);
  EXPECT_EQ(flush.counterexample->batch, 1) << flush.message;
  EXPECT_EQ(flush.counterexample->heads, 1) << flush.message;
  EXPECT_EQ(flush.counterexample->kv_heads, 1) << flush.message;
  // A K/V head mapped wrongly needs two heads of a group over two K/V heads:
  // those stay.
  const PropertyOutcome gqa = run({"broken_wrong_kv_head", "GroupedQueryEquivalence", DType::f64});
  ASSERT_EQ(gqa.status, PropertyStatus::failed) << gqa.message;
  ASSERT_TRUE(gqa.counterexample);
  EXPECT_GE(gqa.counterexample->kv_heads, 2) << gqa.message;
  EXPECT_GT(gqa.counterexample->heads, gqa.counterexample->kv_heads) << gqa.message;
}

// A property of the catalog's name and real-size share with a test's own
// draw and judge: what run_real_sizes is handed.
PropertyDef sized(std::string name, AtSize at_size, DrawFn draw, JudgeFn judge) {
  PropertyDef d;
  d.name = std::move(name);
  d.at_size = at_size;
  d.draw = std::move(draw);
  d.judge = std::move(judge);
  return d;
}

TEST(Runner, ARealSizeFailureIsDrawnOncePerJudgement) {
  // A judge that fails every case: the real-size phase finds a failure at
  // its first shape and searches the smallest failing one, judging dozens
  // of cases. Each must draw its values once. RapidCheck, given a failing
  // case, draws it again to print it: at real sizes that printed every
  // element of a gigabyte problem, minutes per judgement (a thorough run
  // stalled for half an hour in the search).
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  RunConfig config = ci_config();
  CaseContext ctx(*impl, DType::f32, config);
  int draws = 0, judged = 0;
  const Problem tiny = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 1, 1);
  const DrawFn draw = [&](CaseContext&) {
    (void)*rc::gen::map(rc::gen::just(0), [&](int v) {
      ++draws;
      return v;
    });
    return attncheck::Case{tiny};
  };
  const JudgeFn judge = [&](CaseContext& c, const attncheck::Case&) {
    ++judged;
    c.fail("every case fails");
  };
  const SizePhase phase = run_real_sizes(sized("MatchesOracle", AtSize::all, draw, judge), ctx, 1);
  EXPECT_TRUE(phase.failed);
  EXPECT_GT(judged, 5) << "the search judged too few shapes to say anything";
  EXPECT_EQ(draws, judged);
}

TEST(Runner, EveryValueRegimeOccursAmongMatchesOraclesRealSizeShapes) {
  // SPEC 3's covering set: each value regime in at least one real-size
  // MatchesOracle case per run, on every seed (the shapes take the regimes
  // in turn); properties with a share of the shapes draw plain values.
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  for (uint64_t seed : {1, 2, 3}) {
    RunConfig config = ci_config();
    config.seed = seed;
    CaseContext ctx(*impl, DType::f32, config);
    std::set<int> all, some;
    std::set<int>* seen = &all;
    const Problem tiny = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 1, 1);
    const DrawFn draw = [&](CaseContext& c) {
      seen->insert(static_cast<int>(c.spec().size->regime));
      return attncheck::Case{tiny};
    };
    const JudgeFn judge = [](CaseContext& c, const attncheck::Case&) { c.passed(0); };
    run_real_sizes(sized("MatchesOracle", AtSize::all, draw, judge), ctx, seed);
    EXPECT_EQ(all.size(), static_cast<size_t>(gen::kSizeRegimes)) << "seed " << seed;
    seen = &some;
    run_real_sizes(sized("OutputInConvexHull", AtSize::some, draw, judge), ctx, seed);
    EXPECT_EQ(some, std::set<int>{static_cast<int>(gen::SizeRegime::plain)});
  }
}

TEST(Runner, ARealSizeDiscardIsDrawnAgainAtItsShape) {
  // A discarded real-size case (ill-conditioned values, say) is drawn
  // again at the same shape, as RapidCheck does for the small problems:
  // here the first draw at every shape is discarded and the second fails,
  // and the phase must find it.
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  RunConfig config = ci_config();
  CaseContext ctx(*impl, DType::f32, config);
  std::set<std::string> seen;
  const Problem tiny = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 1, 1);
  const DrawFn draw = [&](CaseContext&) { return attncheck::Case{tiny}; };
  const JudgeFn judge = [&](CaseContext& c, const attncheck::Case&) {
    if (seen.insert(c.spec().size->describe()).second) c.discard("the first draw at a shape");
    c.fail("the second draw fails");
  };
  const SizePhase phase = run_real_sizes(sized("MatchesOracle", AtSize::all, draw, judge), ctx, 1);
  EXPECT_TRUE(phase.failed) << phase.counts.discarded << " shapes discarded";
}

TEST(Runner, ARealSizeShapeDiscardedEveryTimeIsJudgedOncePerDraw) {
  // A shape whose every draw is discarded: RapidCheck, having given up,
  // ran the last case again (draw, calls and judge) for its message, a
  // fourth real-size case per shape.
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  RunConfig config = ci_config();
  CaseContext ctx(*impl, DType::f32, config);
  int draws = 0, judged = 0;
  const Problem tiny = Problem::zeros(DType::f32, 1, 1, 1, 1, 1, 1, 1);
  const DrawFn draw = [&](CaseContext&) {
    ++draws;
    return attncheck::Case{tiny};
  };
  const JudgeFn judge = [&](CaseContext& c, const attncheck::Case&) {
    ++judged;
    c.discard("never judgeable");
  };
  const SizePhase phase = run_real_sizes(sized("MatchesOracle", AtSize::all, draw, judge), ctx, 1);
  EXPECT_FALSE(phase.failed);
  ASSERT_GT(phase.counts.discarded, 0);
  EXPECT_EQ(phase.counts.discarded, phase.counts.shapes);
  EXPECT_EQ(phase.counts.judged, 0);
  EXPECT_EQ(draws, judged);
  EXPECT_EQ(judged, 3 * phase.counts.discarded) << "draws per shape";
  // The same when the draw itself discards.
  int refused_draws = 0;
  const DrawFn refusing = [&](CaseContext& c) -> attncheck::Case {
    ++refused_draws;
    c.discard("no problem of this kind at the shape");
  };
  const SizePhase none = run_real_sizes(sized("MatchesOracle", AtSize::all, refusing, judge), ctx, 1);
  ASSERT_GT(none.counts.discarded, 0);
  EXPECT_EQ(refused_draws, 3 * none.counts.discarded) << "draws per shape";
}

// loop_f32, recording where the keys of each call's problem are stored,
// with 1 added to the first output of an MHA problem (kv_heads = heads).
class KeyStorageRecorder final : public Implementation {
 public:
  explicit KeyStorageRecorder(std::shared_ptr<const Implementation> base)
      : base_(std::move(base)) {}
  const ImplInfo& info() const override { return base_->info(); }
  ForwardResult forward(const Problem& p) const override {
    keys.push_back(p.k.data.data());
    ForwardResult r = base_->forward(p);
    if (p.kv_heads == p.heads && !r.out.empty()) r.out[0] += 1;
    return r;
  }
  mutable std::vector<const double*> keys;

 private:
  std::shared_ptr<const Implementation> base_;
};

TEST(Runner, TheFailingCallIsKeptWithoutACopy) {
  // GroupedQueryEquivalence's MHA problem is the group size times the
  // case's K/V (a gigabyte at a thorough decode shape). The context copied
  // every call's problem for the failure report, doubling that in the
  // harness: the case's own problem and a derived one handed over are kept
  // as they are, and the report's failing call is that very problem.
  const auto base = find_impl("loop_f32");
  ASSERT_TRUE(base);
  const PropertyDef* prop = find_property_def("GroupedQueryEquivalence");
  ASSERT_TRUE(prop);
  KeyStorageRecorder impl(base);
  RunConfig config = ci_config();
  CaseContext ctx(impl, DType::f32, config);
  const attncheck::Case c{Problem::zeros(DType::f32, 1, 4, 2, 3, 5, 2, 2)};
  ctx.begin(c);
  try {
    prop->judge(ctx, c);
    FAIL() << "the MHA call's wrong output passed";
  } catch (const CaseEnded& e) {
    ASSERT_TRUE(e.verdict.failed()) << e.verdict.message;
  }
  ASSERT_EQ(impl.keys.size(), 2u);
  ASSERT_TRUE(ctx.failed_call);
  EXPECT_EQ(ctx.failed_call->kv_heads, 4);
  EXPECT_EQ(ctx.failed_call->k.data.data(), impl.keys[1]) << "the MHA problem was copied";
}

// batched_f32 declared with a bf16 accumulation (u = 2^-8: rows of 24 keys
// or more are beyond the first-order analysis), counting its calls on
// problems some row of which is that long.
class Bf16AccumulationCounter final : public Implementation {
 public:
  explicit Bf16AccumulationCounter(std::shared_ptr<const Implementation> base)
      : base_(std::move(base)), info_(base_->info()) {
    info_.precision.accum = DType::bf16;
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    ++calls;
    if (beyond_first_order_by_length(p, info_.precision)) ++unjudgeable_calls;
    return base_->forward(p);
  }
  mutable int calls = 0, unjudgeable_calls = 0;

 private:
  std::shared_ptr<const Implementation> base_;
  ImplInfo info_;
};

TEST(Runner, ARealSizeShapeBeyondThePrecisionIsNotCalledByToleranceJudges) {
  // A tolerance judge cannot judge a real-size case whose rows are too long
  // for the declared accumulation (tolerances() marks them whatever the
  // values). Calling first cost torch_sdpa_bf16's thorough run hours of
  // LibTorch bf16 products for cases then discarded. An exact judge
  // (MaskedWeightsAreZero) still calls at those shapes: it can judge them.
  if (!real_sizes_enabled()) GTEST_SKIP() << "ATTNCHECK_REAL_SIZES=0";
  const auto base = find_impl("batched_f32");
  ASSERT_TRUE(base);
  for (const char* name : {"OutputInConvexHull", "MaskedWeightsAreZero"}) {
    Bf16AccumulationCounter impl(base);
    const PropertyDef* prop = find_property_def(name);
    ASSERT_TRUE(prop);
    const PropertyOutcome o = run_property(*prop, impl, DType::f32, ci_config());
    EXPECT_EQ(o.status, PropertyStatus::passed) << name << ": " << o.message;
    EXPECT_GT(impl.calls, 0) << name;
    std::cout << name << ": " << o.message << "\n";
    if (std::string(name) == "OutputInConvexHull") {
      EXPECT_EQ(impl.unjudgeable_calls, 0) << o.message;
      EXPECT_NE(o.message.find("discarded"), std::string::npos) << o.message;
    } else {
      EXPECT_GT(impl.unjudgeable_calls, 0) << o.message;
    }
  }
}

// loop_f32 refusing (ATTNCHECK_UNSUPPORTED) every problem with more than
// 16 keys: every real-size shape, none of the small problems.
class RefusesRealSizes final : public Implementation {
 public:
  explicit RefusesRealSizes(std::shared_ptr<const Implementation> base)
      : base_(std::move(base)) {}
  const ImplInfo& info() const override { return base_->info(); }
  ForwardResult forward(const Problem& p) const override {
    if (p.tk > 16) return ForwardResult::unsupported();
    return base_->forward(p);
  }

 private:
  std::shared_ptr<const Implementation> base_;
};

TEST(Runner, APropertyWhoseRealSizeShapesWereAllRefusedDoesNotPass) {
  // Issue 31, item 2: it passed on the strength of its small problems,
  // its report line saying only "real sizes: 13 shapes (13 discarded)".
  if (!real_sizes_enabled()) GTEST_SKIP() << "ATTNCHECK_REAL_SIZES=0";
  RefusesRealSizes impl(find_impl("loop_f32"));
  const PropertyOutcome o =
      run_property(*find_property("MatchesOracle"), impl, DType::f32, ci_config());
  EXPECT_EQ(o.status, PropertyStatus::unsupported) << o.message;
  ASSERT_TRUE(o.real_sizes);
  EXPECT_GT(o.real_sizes->shapes, 0);
  EXPECT_EQ(o.real_sizes->unsupported, o.real_sizes->shapes);
  EXPECT_EQ(o.real_sizes->judged, 0);
  EXPECT_NE(o.message.find(fmt::format("real sizes: all {} shapes discarded ({} unsupported)",
                                       o.real_sizes->shapes, o.real_sizes->shapes)),
            std::string::npos)
      << o.message;
}

TEST(Runner, RealSizeShapesBeyondThePrecisionAreCountedPerProperty) {
  // SPEC 3: "12 of 16 real-size shapes beyond the declared precision",
  // per property. A bf16 accumulation declared puts real-size shapes of 24
  // keys or more beyond it: OutputInConvexHull counts them, judges none;
  // batched_f32 as declared has none beyond.
  if (!real_sizes_enabled()) GTEST_SKIP() << "ATTNCHECK_REAL_SIZES=0";
  const auto base = find_impl("batched_f32");
  ASSERT_TRUE(base);
  Bf16AccumulationCounter impl(base);
  const PropertyOutcome hull =
      run_property(*find_property("OutputInConvexHull"), impl, DType::f32, ci_config());
  ASSERT_TRUE(hull.real_sizes) << hull.message;
  EXPECT_GT(hull.real_sizes->shapes, 0);
  const RealSizeCounts& n = hull.real_sizes.value();
  EXPECT_GT(n.beyond_precision, 0) << hull.message;
  EXPECT_EQ(n.judged + n.beyond_precision + n.discarded + n.unsupported, n.shapes) << hull.message;
  EXPECT_EQ(hull.status, PropertyStatus::passed) << "beyond the precision is not discarded";
  EXPECT_NE(hull.message.find("beyond the declared precision"), std::string::npos) << hull.message;
  const PropertyOutcome matches =
      run_property(*find_property("MatchesOracle"), *base, DType::f32, ci_config());
  ASSERT_TRUE(matches.real_sizes);
  EXPECT_EQ(matches.status, PropertyStatus::passed) << matches.message;
  EXPECT_EQ(matches.real_sizes->beyond_precision, 0) << matches.message;
  EXPECT_EQ(matches.real_sizes->judged, matches.real_sizes->shapes) << matches.message;
  EXPECT_NE(matches.message.find(fmt::format("real sizes: {} shapes: {} judged",
                                             matches.real_sizes->shapes,
                                             matches.real_sizes->shapes)),
            std::string::npos)
      << matches.message;
}

TEST(Runner, ValueLinearityJudgesFp8ValuesAtRealSize) {
  // Seed 2 drew online_scaled_e4m3_p's two real-size shapes with E4M3 V,
  // whose a V1 + b V2 it could not hold: every draw discarded, and the
  // property read unsupported (real sizes: all 2 shapes discarded).
  if (!real_sizes_enabled()) GTEST_SKIP() << "ATTNCHECK_REAL_SIZES=0";
  RunConfig config = ci_config();
  config.seed = 2;
  const PropertyOutcome o = run({"online_scaled_e4m3_p", "ValueLinearity", DType::f32}, config);
  EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
  ASSERT_TRUE(o.real_sizes) << o.message;
  EXPECT_EQ(o.real_sizes->judged, o.real_sizes->shapes) << o.message;
}

TEST(Runner, SameSeedSameOutcome) {
  const Case c{"broken_softmax_query_axis", "MatchesOracle", DType::f64};
  EXPECT_EQ(run(c).message, run(c).message);
  const Case ok{"loop_f32", "MatchesOracle", DType::f32};
  EXPECT_EQ(run(ok).max_budget_used, run(ok).max_budget_used);
}

TEST(Runner, OneElementBugShrinksToATinyProblem) {
  const PropertyOutcome o = run({"broken_softmax_query_axis", "MatchesOracle", DType::f64});
  ASSERT_TRUE(o.counterexample.has_value());
  EXPECT_LE(o.counterexample->tq, 2);
  EXPECT_LE(o.counterexample->tk, 2);
  EXPECT_EQ(o.counterexample->dk, 1);
  EXPECT_EQ(o.counterexample->batch, 1);
  EXPECT_EQ(o.counterexample->heads, 1);
}

TEST(Runner, FailureReportHasEveryPartAndSavesAFixture) {
  const auto dir = std::filesystem::temp_directory_path() / "attncheck-test-failures";
  std::filesystem::remove_all(dir);
  RunConfig config = ci_config();
  config.save_failures_dir = dir.string();
  const PropertyOutcome o = run({"broken_extra_logit", "ConstantValuesReproduced", DType::f64}, config);
  ASSERT_EQ(o.status, PropertyStatus::failed);
  for (const char* part : {"FAILED ConstantValuesReproduced on broken_extra_logit", "expected",
                           "got", "error", "tolerance", "budget used", "shrunk problem",
                           "Q = [[", "seed 20260101", "RC_PARAMS=\"", "reproduce=", "fixture: "}) {
    EXPECT_NE(o.message.find(part), std::string::npos) << "missing '" << part << "' in\n"
                                                       << o.message;
  }
  ASSERT_TRUE(o.fixture.has_value());
  const Fixture f = load_fixture(*o.fixture);
  EXPECT_EQ(f.meta.property, "ConstantValuesReproduced");
  EXPECT_EQ(f.meta.impl, "broken_extra_logit");
  EXPECT_EQ(f.meta.seed, kDefaultSeed);
  EXPECT_EQ(f.problem.tq, o.counterexample->tq);
  EXPECT_EQ(f.meta.strict, false);
  EXPECT_EQ(f.meta.profile, "ci");
  EXPECT_FALSE(f.meta.cases);
  EXPECT_FALSE(f.meta.timeout_ms);
  std::filesystem::remove_all(dir);
}

TEST(Runner, ReproduceLineAndFixtureCarryEveryJudgementOption) {
  const auto dir = std::filesystem::temp_directory_path() / "attncheck-test-options";
  std::filesystem::remove_all(dir);
  RunConfig config = ci_config();
  config.save_failures_dir = dir.string();
  config.strict = true;
  config.profile = Profile::thorough;
  config.cases = 7;
  config.timeout_ms = 1234;
  const PropertyOutcome o = run({"broken_extra_logit", "ConstantValuesReproduced", DType::f64}, config);
  ASSERT_EQ(o.status, PropertyStatus::failed);
  EXPECT_NE(o.message.find("--dtype f64 --seed 20260101 --strict --profile thorough --cases 7 "
                           "--timeout-ms 1234\n"),
            std::string::npos)
      << o.message;
  ASSERT_TRUE(o.fixture.has_value());
  const Fixture f = load_fixture(*o.fixture);
  EXPECT_EQ(f.meta.strict, true);
  EXPECT_EQ(f.meta.profile, "thorough");
  EXPECT_EQ(f.meta.cases, 7);
  EXPECT_EQ(f.meta.timeout_ms, 1234);
  std::filesystem::remove_all(dir);
}

TEST(Runner, CasesOptionAndThoroughProfileScaleTheBudget) {
  RunConfig config = ci_config();
  config.cases = 7;
  EXPECT_EQ(run({"loop_f64", "MatchesOracle", DType::f64}, config).cases, 7);
  config.cases = 0;
  config.profile = Profile::thorough;
  EXPECT_EQ(run({"loop_f64", "RowSumsToOne", DType::f64}, config).cases,
            10 * find_property("RowSumsToOne")->default_cases);
}

TEST(Runner, WeightsAreObservedThroughIdentityValues) {
  // online_f64 returns no weights: V = I shows them.
  ASSERT_FALSE(find_impl("online_f64")->info().has(ATTNCHECK_FEATURE_WEIGHTS));
  for (const char* property : {"RowSumsToOne", "ScaledScoreVarianceNearOne"}) {
    const PropertyOutcome o = run({"online_f64", property, DType::f64});
    EXPECT_EQ(o.status, PropertyStatus::passed) << property << ": " << o.message;
  }
}

// online_f64 recording the largest problem it is handed, by SPEC 3's cost.
class CostRecorder final : public Implementation {
 public:
  explicit CostRecorder(std::shared_ptr<const Implementation> base) : base_(std::move(base)) {}
  const ImplInfo& info() const override { return base_->info(); }
  ForwardResult forward(const Problem& p) const override {
    max_cost = std::max(max_cost, p.batch * p.heads * p.tq * p.tk * (p.dk + p.dv));
    max_tk = std::max(max_tk, p.tk);
    return base_->forward(p);
  }
  mutable int64_t max_cost = 0, max_tk = 0;

 private:
  std::shared_ptr<const Implementation> base_;
};

TEST(Runner, IdentityValuesAtRealSizeAreWeightedLikeEveryOtherShape) {
  // V = I (dv = tk) is fitted to the cost cap by RowSumsToOne itself. It
  // left out the oracle's weight for an f64 accumulation (32), so each
  // shape cost the oracle 32 times the cap: online_f64's thorough
  // RowSumsToOne took 70 s where the weighted shapes take 1.5 s.
  if (!real_sizes_enabled()) GTEST_SKIP() << "ATTNCHECK_REAL_SIZES=0";
  CostRecorder impl(find_impl("online_f64"));
  ASSERT_FALSE(impl.info().has(ATTNCHECK_FEATURE_WEIGHTS));
  const int64_t weight = gen::reference_weight(impl.info());
  ASSERT_EQ(weight, 32);
  const PropertyOutcome o =
      run_property(*find_property("RowSumsToOne"), impl, DType::f64, ci_config());
  EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
  ASSERT_TRUE(o.real_sizes);
  EXPECT_GT(o.real_sizes->judged, 0) << o.message;
  EXPECT_GT(impl.max_tk, 64) << "no real-size shape was handed over";
  EXPECT_LE(impl.max_cost * weight, gen::size_cost_cap(Profile::ci));
}

TEST(Runner, UnsupportedDtypeIsSkippedWithReason) {
  const PropertyOutcome o = run({"loop_f64", "MatchesOracle", DType::f32});
  EXPECT_EQ(o.status, PropertyStatus::skipped);
  EXPECT_NE(o.message.find("f32"), std::string::npos);
}

// An implementation that refuses every problem.
class Refuses : public Implementation {
 public:
  Refuses() : info_(find_impl("loop_f64")->info()) { info_.name = "refuses"; }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem&) const override { return ForwardResult::unsupported(); }

 private:
  ImplInfo info_;
};

// A replayed case that is discarded says why in one line: the judge's
// reason, not RapidCheck's description of the discard.
TEST(Runner, ADiscardedReplayGivesItsReasonInOneLine) {
  Fixture f;
  f.problem = Problem::zeros(DType::f64, 1, 1, 1, 2, 2, 2, 2);
  f.meta.property = "MatchesOracle";
  f.meta.impl = "refuses";
  const PropertyOutcome o = replay_fixture(f, Refuses(), RunConfig{});
  EXPECT_EQ(o.status, PropertyStatus::unsupported);
  EXPECT_EQ(o.message, "the fixture's case was discarded: unsupported by the implementation");
}

}  // namespace
}  // namespace attncheck
