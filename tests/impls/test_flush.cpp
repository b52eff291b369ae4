// The flush twin: an exp that returns 0 below 2^-100 while
// declaring no flush is caught by the property named in its declaration,
// on every seed tried, and its bug lies outside what a declared flush
// would cover.

#include <gtest/gtest.h>

#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "judge/tolerance.h"
#include "test_support.h"

namespace attncheck {
namespace {

using test_support::impl;

TEST(Flush, TwinThatFlushesBelow2ToTheMinus100IsCaught) {
  const auto twin = impl("broken_exp_flushes_tiny");
  const PropertyDef* prop = find_property_def(twin->info().caught_by);
  ASSERT_NE(prop, nullptr);
  for (uint64_t seed : {1, 2, 3}) {
    RunConfig config;
    config.seed = seed;
    const PropertyOutcome o = run_property(*prop, *twin, DType::f64, config);
    EXPECT_EQ(o.status, PropertyStatus::failed) << "seed " << seed << ": " << o.message;
  }
}

TEST(Flush, DeclaringAFlushDoesNotCoverTheTwin) {
  // Scores 0 and -80: e^-80 = 1.8e-35 is a normal double far above twice
  // the smallest normal (2^-1021); the twin returns weight 0 for it.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 1, 1);
  p.scale = 1;
  p.q.at(0, 0, 0, 0) = 1;
  p.k.at(0, 0, 1, 0) = -80;
  p.v.at(0, 0, 1, 0) = 1;
  const ForwardResult r = impl("broken_exp_flushes_tiny")->forward(p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  EXPECT_EQ(r.weights[1], 0.0);
  const OracleResult o = oracle(p);
  PrecisionTraits t = impl("broken_exp_flushes_tiny")->info().precision;
  t.ftz_formats = kFtzAccum | kFtzPCast | kFtzOut;
  const Tolerances tol = tolerances(p, o, t);
  EXPECT_GT(o.weights[1], 1e6 * tol.weights[1]);
  EXPECT_GT(o.out[0], 1e6 * tol.out[0]);
}

}  // namespace
}  // namespace attncheck
