// Tests of the eager built-ins: eager_bf16 and eager_f16 compute
// as eager framework code does (scores, weights and output stored in the
// format), declare it, pass every property they declare or are skipped with
// the reason, and the twin that rounds S but declares float scores is
// caught by MatchesOracle.

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "test_support.h"

namespace attncheck {
namespace {

using test_support::impl;

RunConfig config_with_seed(uint64_t seed) {
  RunConfig c;
  c.seed = seed;
  return c;
}

TEST(Eager, DeclaresWhatItComputes) {
  for (DType d : {DType::bf16, DType::f16}) {
    const ImplInfo& info = impl(std::string("eager_") + std::string(dtype_name(d)))->info();
    EXPECT_EQ(info.kind, Kind::reference);
    EXPECT_EQ(info.dtypes, dtype_bit(d));
    EXPECT_EQ(info.precision.exp_ulps, 1u);  // expf, as PyTorch's float softmax
    EXPECT_EQ(info.precision.key_block, 0);
    EXPECT_EQ(info.precision.accum, DType::f32);
    EXPECT_EQ(info.precision.s_cast_format(), d);
    EXPECT_EQ(info.precision.p_cast, d);
    EXPECT_FALSE(info.has(ATTNCHECK_FEATURE_LSE));  // eager code never forms it
    EXPECT_TRUE(info.has(ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_SOFTCAP |
                         ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_BIAS));
  }
  const ImplInfo& twin = impl("broken_eager_bf16_undeclared_s_cast")->info();
  EXPECT_EQ(twin.kind, Kind::broken);
  EXPECT_EQ(twin.precision.s_cast_format(), twin.precision.accum);
}

TEST(Eager, StoresScoresWeightsAndOutputInTheFormat) {
  // q . k = 32.375 is stored as 32.5 in bf16 (a logit seen in practice) and kept in
  // f16; with key 1 at score 32 and values 0 and 1, the output is the
  // weight of key 1: 1 / (1 + e^0.5) from the stored bf16 scores.
  // dk = 2: q . k = 32.25 + 0.125, which bf16 cannot hold.
  Problem q = Problem::zeros(DType::bf16, 1, 1, 1, 1, 2, 2, 1);
  q.scale = 1;
  q.q.at(0, 0, 0, 0) = q.q.at(0, 0, 0, 1) = 1;
  q.k.at(0, 0, 0, 0) = 32.25;
  q.k.at(0, 0, 0, 1) = 0.125;
  q.k.at(0, 0, 1, 0) = 32;
  q.v.at(0, 0, 1, 0) = 1;
  const ForwardResult r = impl("eager_bf16")->forward(q);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  const double a1 = round_to(DType::bf16, 1 / (1 + std::exp(0.5)));  // from 32.5 and 32
  EXPECT_EQ(r.weights[1], a1);
  EXPECT_EQ(r.out[0], a1);
  EXPECT_EQ(r.weights[0], round_to(DType::bf16, 1 / (1 + std::exp(-0.5))));
  // In f16 32.375 is exact: the weight comes from the unrounded logit gap.
  q.dtype = DType::f16;
  const ForwardResult h = impl("eager_f16")->forward(q);
  ASSERT_EQ(h.status, Status::ok) << h.error;
  EXPECT_EQ(h.weights[1], round_to(DType::f16, 1 / (1 + std::exp(0.375))));
}

TEST(Eager, ScaleIsAppliedAfterTheStoredProduct) {
  // q . k = 3.0244140625 is stored as 3.03125, then * 0.75 = 2.2734375
  // stored as 2.28125 (bf16 spacing 2^-6 there): two roundings, where
  // rounding 0.75 * 3.0244140625 = 2.268310546875 once gives 2.265625.
  Problem p = Problem::zeros(DType::bf16, 1, 1, 1, 1, 2, 2, 1);
  p.scale = 0.75;
  p.q.at(0, 0, 0, 0) = p.q.at(0, 0, 0, 1) = 1;
  p.k.at(0, 0, 0, 0) = 3;
  p.k.at(0, 0, 0, 1) = 0.0244140625;
  p.v.at(0, 0, 1, 0) = 1;
  ASSERT_EQ(round_to(DType::bf16, 3.0244140625), 3.03125);
  ASSERT_EQ(round_to(DType::bf16, 0.75 * 3.03125), 2.28125);
  ASSERT_EQ(round_to(DType::bf16, 0.75 * 3.0244140625), 2.265625);
  const ForwardResult r = impl("eager_bf16")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  EXPECT_EQ(r.weights[1], round_to(DType::bf16, 1 / (1 + std::exp(2.28125))));
  EXPECT_NE(r.weights[1], round_to(DType::bf16, 1 / (1 + std::exp(2.265625))));
}

TEST(Eager, EveryDeclaredPropertyPassesOrIsSkippedWithItsReason) {
  for (const char* name : {"eager_bf16", "eager_f16"}) {
    const auto i = impl(name);
    const DType d = i->info().precision.p_cast;
    for (uint64_t seed : {1, 2, 3}) {
      for (const PropertyDef& prop : property_defs()) {
        const PropertyOutcome o = run_property(prop, *i, d, config_with_seed(seed));
        EXPECT_TRUE(o.status == PropertyStatus::passed || o.status == PropertyStatus::skipped)
            << name << " " << prop.name << " seed " << seed << ": " << o.message;
        EXPECT_EQ(o.message.find("gave up"), std::string::npos) << o.message;
        if (o.status == PropertyStatus::passed) {
          EXPECT_LT(o.max_budget_used, 1) << prop.name;
        }
        if (prop.name == "ExtremeScoresStayFinite") {
          EXPECT_EQ(o.status, PropertyStatus::skipped);
          EXPECT_NE(o.message.find("not judgeable under the declared precision"),
                    std::string::npos)
              << o.message;
        }
      }
    }
  }
}

TEST(Eager, ExtremeScoresStayJudgeableWhereScoresStayInFloat) {
  // The skip is the declared precision's, not the format's: bf16 inputs
  // with float scores (batched_bf16) still have extreme scores to judge.
  const PropertyDef* prop = find_property_def("ExtremeScoresStayFinite");
  ASSERT_NE(prop, nullptr);
  EXPECT_EQ(prop->skip_reason(impl("batched_bf16")->info(), DType::bf16), std::nullopt);
  EXPECT_NE(prop->skip_reason(impl("eager_bf16")->info(), DType::bf16), std::nullopt);
}

TEST(Eager, TwinThatHidesItsScoreStorageIsCaughtByMatchesOracle) {
  const PropertyDef* prop = find_property_def("MatchesOracle");
  ASSERT_NE(prop, nullptr);
  for (uint64_t seed : {1, 2, 3}) {
    const PropertyOutcome o = run_property(*prop, *impl("broken_eager_bf16_undeclared_s_cast"),
                                           DType::bf16, config_with_seed(seed));
    EXPECT_EQ(o.status, PropertyStatus::failed) << "seed " << seed << ": " << o.message;
  }
}

}  // namespace
}  // namespace attncheck
