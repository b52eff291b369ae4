// run/judge_once.h (one verdict, one rule for exceptions) and the shrinker's
// size passes (run/shrink_passes.h), on judges and failures made to order.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"
#include "core/cancel.h"
#include "properties/case_context.h"
#include "run/judge_once.h"
#include "run/shrink_passes.h"

namespace attncheck {
namespace {

PropertyDef judged_by(JudgeFn judge) {
  PropertyDef d;
  d.name = "MatchesOracle";
  d.judge = std::move(judge);
  return d;
}

class JudgeOnce : public ::testing::Test {
 protected:
  std::shared_ptr<const Implementation> impl_ = find_impl("loop_f32");
  RunConfig config_;
  CaseContext ctx_{*impl_, DType::f32, config_};
  const Case case_{Problem::zeros(DType::f32, 1, 1, 1, 2, 3, 2, 2)};
};

TEST_F(JudgeOnce, ReturnsTheVerdictTheJudgeEndedTheCaseWith) {
  const Verdict pass = judge_once(judged_by([](CaseContext& c, const Case&) { c.passed(0.5); }),
                                  ctx_, case_);
  EXPECT_TRUE(pass.passed());
  EXPECT_EQ(ctx_.cases, 1);

  const Verdict fail = judge_once(
      judged_by([](CaseContext& c, const Case&) { c.fail("out[0] is 2, expected 1"); }), ctx_,
      case_);
  ASSERT_TRUE(fail.failed());
  EXPECT_EQ(fail.message, "out[0] is 2, expected 1");
  EXPECT_FALSE(fail.died);
  EXPECT_EQ(ctx_.failure_message, fail.message);
  ASSERT_TRUE(ctx_.failed_case);
  EXPECT_EQ(ctx_.failed_case->problem.tk, 3);

  const Verdict discard = judge_once(
      judged_by([](CaseContext& c, const Case&) { c.discard("ill-conditioned"); }), ctx_, case_);
  ASSERT_TRUE(discard.discarded());
  EXPECT_EQ(discard.message, "ill-conditioned");
  EXPECT_EQ(ctx_.discard_reasons["ill-conditioned"], 1);
}

TEST_F(JudgeOnce, AStrayExceptionFailsTheCaseAndIsRecordedAsEveryFailureIs) {
  // The driver, the real-size search, the shrink passes and replay once
  // each had a rule of their own for this; now it is one.
  const Verdict v = judge_once(
      judged_by([](CaseContext&, const Case&) { throw std::runtime_error("vector::at"); }), ctx_,
      case_);
  ASSERT_TRUE(v.failed());
  EXPECT_EQ(v.message, "exception while judging: vector::at");
  EXPECT_EQ(ctx_.failure_message, v.message);
  ASSERT_TRUE(ctx_.failed_case);
  EXPECT_EQ(ctx_.failures, 1);

  const Verdict odd = judge_once(judged_by([](CaseContext&, const Case&) { throw 42; }), ctx_,
                                 case_);
  ASSERT_TRUE(odd.failed());
  EXPECT_EQ(odd.message, "a non-standard exception while judging");
}

TEST_F(JudgeOnce, BadArgsAndCancellationAreNoVerdict) {
  EXPECT_THROW(judge_once(judged_by([](CaseContext&, const Case&) {
                            throw InputError("field 'args.row': outside the problem");
                          }),
                          ctx_, case_),
               InputError);
  EXPECT_THROW(judge_once(judged_by([](CaseContext&, const Case& c) {
                            (void)c.args.at("row").get<int>();  // absent: a JSON error
                          }),
                          ctx_, case_),
               nlohmann::json::exception);
  EXPECT_THROW(judge_once(judged_by([](CaseContext&, const Case&) { throw Cancelled(); }), ctx_,
                          case_),
               Cancelled);
  EXPECT_EQ(ctx_.failures, 0);
}

TEST(SizePasses, AreOneNamedListInTheOrderTheyRun) {
  std::vector<std::string> names;
  for (const SizeShrinkPass& pass : size_shrink_passes()) names.push_back(pass.name);
  const std::vector<std::string> expected = {
      "drop_softcap",     "drop_bias",        "drop_mask",        "drop_window",
      "drop_causal",      "drop_key_padding", "narrow_window",    "shorten_keys",
      "shorten_queries",  "narrow_window_again", "shrink_dk",     "shrink_dv",
      "fewer_heads",      "fewer_batch_entries", "fewer_sequences", "plain_regime",
      "simpler_values"};
  EXPECT_EQ(names, expected);
}

TEST(SizePasses, ShrinkAFailureToTheSmallestShapeThatStillFails) {
  // A 64-key tile bug in the last dims of a head of 8 or more, with every
  // other part of the shape incidental: the search must find tk 65 and dk
  // 8 exactly (the lengths below the reported ones pass), and drop the
  // structure, heads and batch the failure does not need.
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  RunConfig config;
  CaseContext ctx(*impl, DType::f32, config);
  gen::GenSpec spec;
  spec.features = ATTNCHECK_FEATURE_GQA;
  gen::SizeShape found;
  found.batch = 2;
  found.heads = 8;
  found.kv_heads = 2;
  found.tq = 100;
  found.tk = 1000;
  found.dk = 64;
  found.dv = 32;
  found.causal = true;
  found.bias = true;
  found.softcap = 30;
  found.regime = gen::SizeRegime::near_flat;
  int judged = 0;
  const SizeSearch search{[&](const gen::SizeShape& s) {
                            ++judged;
                            return s.tk >= 65 && s.dk >= 8 && s.regime == gen::SizeRegime::near_flat;
                          },
                          spec, ctx};
  const gen::SizeShape cur = shrink_at_size(found, search);
  EXPECT_EQ(cur.tk, 65);
  EXPECT_EQ(cur.dk, 8);
  EXPECT_EQ(cur.dv, 1);
  EXPECT_EQ(cur.tq, 1);
  EXPECT_EQ(cur.heads, 1);
  EXPECT_EQ(cur.kv_heads, 1);
  EXPECT_EQ(cur.batch, 1);
  EXPECT_FALSE(cur.causal);
  EXPECT_FALSE(cur.bias);
  EXPECT_EQ(cur.softcap, 0);
  EXPECT_EQ(cur.regime, gen::SizeRegime::near_flat) << "the failure needs its regime";
  EXPECT_LT(judged, 200) << "a search, not a sweep";
}

TEST(SizePasses, SmallestFailingWalksTheGridThenBisects) {
  const std::vector<int64_t> grid = {1, 2, 4, 8, 16, 32, 64, 128};
  std::vector<int64_t> asked;
  const int64_t n = smallest_failing(1000, grid, [&](int64_t x) {
    asked.push_back(x);
    return x >= 65;
  });
  EXPECT_EQ(n, 65);
  // Upwards to the first failing grid length (128), then bisection of (64, 128).
  ASSERT_GE(asked.size(), 8u);
  EXPECT_EQ(asked[7], 128);
}

}  // namespace
}  // namespace attncheck
