// P kept in E4M3 for P.V (SPEC 4): online_scaled_e4m3_p, a
// FlashAttention-3 style kernel that scales P by 256 before its E4M3 cast
// and declares p_cast e4m3, passes the whole catalog under the CI profile,
// while broken_fp8_p_unscaled (the cast without the scale, declared as no
// cast) is still caught by MatchesOracle.

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

TEST(Fp8P, TheScaledKernelDeclaresItsE4M3PCast) {
  const auto impl = find_impl("online_scaled_e4m3_p");
  ASSERT_NE(impl, nullptr);
  const ImplInfo& info = impl->info();
  EXPECT_EQ(info.kind, Kind::reference);
  EXPECT_EQ(info.precision.accum, DType::f32);
  EXPECT_EQ(info.precision.p_cast, DType::e4m3);
  EXPECT_EQ(info.precision.key_block, 16);
  EXPECT_EQ(info.precision.exp_ulps, 1U);
  EXPECT_TRUE(info.has(ATTNCHECK_FEATURE_DESCALE));
  for (const DTypeCombo& c : info.combos) EXPECT_EQ(c.kv, DType::e4m3);
  // No plain dtype: never another implementation's agreement partner.
  EXPECT_EQ(info.dtypes, 0U);
}

TEST(Fp8P, TheScaledKernelPassesEveryPropertyUnderTheCiProfile) {
  const auto impl = find_impl("online_scaled_e4m3_p");
  ASSERT_NE(impl, nullptr);
  RunConfig config;
  config.seed = kDefaultSeed;
  int passed = 0;
  for (DType d : {DType::f32, DType::bf16}) {
    ASSERT_TRUE(impl->info().supports_output(d));
    for (const PropertyDef& prop : property_defs()) {
      const auto start = std::chrono::steady_clock::now();
      const PropertyOutcome o = run_property(prop, *impl, d, config);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cout << dtype_name(d) << " " << prop.name << ": " << status_name(o.status) << " budget "
                << o.max_budget_used << " (" << s << " s)\n";
      EXPECT_TRUE(o.status == PropertyStatus::passed || o.status == PropertyStatus::skipped)
          << dtype_name(d) << " " << prop.name << ": " << status_name(o.status) << "\n"
          << o.message;
      if (o.status == PropertyStatus::passed) {
        ++passed;
        EXPECT_LE(o.max_budget_used, 1.0) << prop.name;
      }
    }
  }
  EXPECT_GE(passed, 20);  // judged, not skipped wholesale
}

TEST(Fp8P, TheUnscaledTwinIsStillCaught) {
  const auto impl = find_impl("broken_fp8_p_unscaled");
  ASSERT_NE(impl, nullptr);
  const PropertyDef* prop = find_property_def(impl->info().caught_by);
  ASSERT_NE(prop, nullptr);
  RunConfig config;
  config.seed = kDefaultSeed;
  for (DType d : {DType::f32, DType::bf16}) {
    if (!impl->info().supports_output(d)) continue;
    const PropertyOutcome o = run_property(*prop, *impl, d, config);
    EXPECT_EQ(o.status, PropertyStatus::failed) << dtype_name(d) << "\n" << o.message;
  }
}

}  // namespace
}  // namespace attncheck
