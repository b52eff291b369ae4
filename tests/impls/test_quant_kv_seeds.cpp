// The block-quantized K/V references (SPEC 1.2, issue 33), quant_kv_f32
// and quant_kv_q8_f32, pass every property of the catalog under the CI
// profile on seeds 1, 2 and 3, in both block formats (or are skipped with
// a reason: none is unsupported on account of the block format). About a
// minute, so labelled slow.

#include <gtest/gtest.h>

#include "attncheck/properties.h"
#include "attncheck/registry.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"

namespace attncheck {
namespace {

TEST(QuantKv, TheReferencesPassEveryPropertyOnSeedsOneToThree) {
  for (const char* name : {"quant_kv_f32", "quant_kv_q8_f32"})
    for (uint64_t seed : {1, 2, 3}) {
      RunConfig config;
      config.seed = seed;
      for (const PropertyDef& p : property_defs()) {
        const PropertyOutcome o = run_property(p, *find_impl(name), DType::f32, config);
        EXPECT_TRUE(o.status == PropertyStatus::passed || o.status == PropertyStatus::skipped)
            << name << " seed " << seed << " " << p.name << ": " << status_name(o.status) << " "
            << o.message;
      }
    }
}

}  // namespace
}  // namespace attncheck
