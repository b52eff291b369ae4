// What a property draws or replays stays inside the formats the
// values are stored and judged in. ExtremeScoresStayFinite scaled q against
// the output format, not q's own (an f16 q of an f32 output got 2^24 and
// 65536); ValueLinearity let v_descale (a V1 + b V2) leave the output
// format, where every correct kernel returns inf, and its replay failed
// loop_f32.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

const std::string kRefused = std::string(ATTNCHECK_SOURCE_DIR) + "/fixtures/regressions/refused/";

// loop_f32 declaring one mixed combination only, so that every problem a
// run draws takes its input formats from it; it counts the calls whose
// stored values its formats cannot hold (a plugin's codec refuses those).
class OneCombination final : public Implementation {
 public:
  OneCombination(std::shared_ptr<const Implementation> base, DTypeCombo combo)
      : base_(std::move(base)), info_(base_->info()) {
    info_.name = "one_combination";
    info_.combos = {combo};
    info_.dtypes = 0;
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    ++calls;
    const auto holds = [](DType d, const Tensor& t) {
      for (double x : t.data)
        if (std::isinf(x) || !representable(d, x)) return false;
      return true;
    };
    const DTypeCombo c = combo_of(p);
    if (!holds(c.q, p.q) || !holds(c.kv, p.k) || !holds(c.kv, p.v)) ++unstorable_calls;
    return base_->forward(p);
  }
  mutable int calls = 0, unstorable_calls = 0;

 private:
  std::shared_ptr<const Implementation> base_;
  ImplInfo info_;
};

RunConfig config() {
  RunConfig c;
  c.seed = kDefaultSeed;
  return c;
}

TEST(ExtremeScores, QIsScaledWithinItsOwnFormat) {
  const auto base = find_impl("loop_f32");
  ASSERT_TRUE(base);
  const PropertyDef* prop = find_property_def("ExtremeScoresStayFinite");
  ASSERT_TRUE(prop);
  // f16 reaches 65504, E4M3 448: far below the scores 2^7 .. 2^17 of an f32
  // accumulation unless q is aimed within them.
  for (const DTypeCombo combo : {DTypeCombo{DType::f16, DType::f16, DType::f32},
                                 DTypeCombo{DType::e4m3, DType::e4m3, DType::f32}}) {
    SCOPED_TRACE(combo_name(combo));
    OneCombination impl(base, combo);
    const PropertyOutcome o = run_property(*prop, impl, DType::f32, config());
    EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
    EXPECT_GT(impl.calls, 0);
    EXPECT_EQ(impl.unstorable_calls, 0) << "of " << impl.calls << " calls";
  }
}

// The saved case: v = 2^125, v_descale 2, a = b = 2. Replay
// refuses it (exit 2 on the command line) with one line saying why; the
// ctest regression.refused.* runs the command itself.
TEST(ValueLinearity, ReplayRefusesALogicalSumBeyondTheOutputFormat) {
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  ASSERT_TRUE(impl->info().has(ATTNCHECK_FEATURE_DESCALE));
  const Fixture f = load_fixture(kRefused + "value-linearity-f32-descaled-sum-overflows.json");
  try {
    const PropertyOutcome o = replay_fixture(f, *impl, RunConfig{});
    ADD_FAILURE() << "replayed: " << o.message;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("field 'args.a': not a case of ValueLinearity"), std::string::npos) << msg;
    EXPECT_NE(msg.find("beyond the largest finite f32"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The refusal is of the sum, not of the values: the same problem with a =
// 2, b = -1 (a V1 + b V2 = V1, logical 2^126) is judged, and loop_f32
// passes it.
TEST(ValueLinearity, ValuesNearTheTopOfTheOutputFormatAreStillJudged) {
  const auto impl = find_impl("loop_f32");
  ASSERT_TRUE(impl);
  Fixture f = load_fixture(kRefused + "value-linearity-f32-descaled-sum-overflows.json");
  f.args["b"] = -1.0;
  const PropertyOutcome o = replay_fixture(f, *impl, RunConfig{});
  EXPECT_EQ(o.status, PropertyStatus::passed) << o.message;
}

// Runs draw such sums too (descales up to 3, coefficients up to 2 in
// magnitude, values up to the generator's top): they are discarded, never
// judged, so correct kernels keep passing.
TEST(ValueLinearity, CorrectDescaledKernelsPass) {
  const PropertyDef* prop = find_property_def("ValueLinearity");
  ASSERT_TRUE(prop);
  for (const char* name : {"loop_f32", "paged_online_f32"}) {
    SCOPED_TRACE(name);
    const auto impl = find_impl(name);
    ASSERT_TRUE(impl);
    for (DType d : {DType::f32, DType::bf16}) {
      if (!impl->info().supports_output(d)) continue;
      const PropertyOutcome o = run_property(*prop, *impl, d, config());
      EXPECT_EQ(o.status, PropertyStatus::passed) << dtype_name(d) << ": " << o.message;
    }
  }
}

}  // namespace
}  // namespace attncheck
