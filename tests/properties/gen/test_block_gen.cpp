// The draws of block-quantized K/V (SPEC 1.2, 3): every problem is valid
// (dk and dv whole blocks, every block exact, strides in whole blocks),
// each kind of block occurs (zero scale, the extreme integers, f16's
// largest finite scale where v's limit allows it, subnormal and negative
// scales), and shrinking goes to small integers and the plain scale.

#include <gtest/gtest.h>

#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include <cmath>
#include <iostream>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"
#include "properties/gen/generators.h"

namespace attncheck {
namespace {

constexpr int kSamples = 600;

// Every feature and serving part loop_f64 has, f32 output, K/V in `kv`.
gen::GenSpec block_spec(DType kv) {
  ImplInfo info = find_impl("loop_f64")->info();
  info.features |= gen::kServingParts;
  info.combos = {{DType::f32, kv, DType::f32}};
  return gen::with_serving_parts(gen::spec_for(info, DType::f32));
}

TEST(BlockGenerator, EveryProblemIsValidAndEveryBlockKindOccurs) {
  for (DType kv : kBlockFormats) {
    SCOPED_TRACE(dtype_name(kv));
    gen::Coverage coverage;
    {
      gen::CoverageScope scope(coverage);
      rc::Random random(2026);
      const auto g = gen::problem(block_spec(kv));
      for (int k = 0; k < kSamples; ++k) {
        rc::Random r = random.split();
        const Problem p = g(r, k % 100).value();
        ASSERT_EQ(p.kv_dtype, kv);
        ASSERT_EQ(p.dk % 32, 0);
        ASSERT_EQ(p.dv % 32, 0);
        ASSERT_NO_THROW(p.validate());
      }
    }
    for (const char* kind :
         {"block plain", "block zero scale", "block extreme integers", "block top scale",
          "block subnormal scale", "block negative scale", "block scale f16's largest finite"}) {
      std::cout << kind << ": " << coverage.counts[kind] << "\n";
      EXPECT_GE(coverage.counts[kind], 20) << kind;
    }
  }
}

// A property that fails when any value of K is nonzero shrinks to one
// nonzero block value, the smallest integer (+-1) with the plain scale.
TEST(BlockGenerator, ShrinksToSmallIntegers) {
  for (DType kv : kBlockFormats) {
    SCOPED_TRACE(dtype_name(kv));
    const gen::GenSpec spec = block_spec(kv);
    Problem last;
    rc::detail::TestParams params;
    params.seed = 1;
    rc::detail::TestListenerAdapter listener;
    const auto result = rc::detail::checkTestable(
        [&] {
          const Problem p = *gen::problem(spec);
          for (double x : p.k.data) {
            if (std::isfinite(x) && x != 0) {
              last = p;
              RC_FAIL("a nonzero key");
            }
          }
        },
        rc::detail::TestMetadata{}, params, listener);
    ASSERT_TRUE(result.template is<rc::detail::FailureResult>());
    int nonzero = 0;
    double value = 0;
    for (double x : last.k.data) {
      if (std::isfinite(x) && x != 0) {
        ++nonzero;
        value = x;
      }
    }
    EXPECT_EQ(nonzero, 1) << "dk " << last.dk << " tk " << last.tk << " paged " << last.paged.has_value()
                          << " packed " << last.packed.has_value() << " value " << value << " k[0] "
                          << last.k.data[0] << " size " << last.k.data.size();
    EXPECT_EQ(last.dk, 32);
    // +-1 times a power-of-two scale.
    int e = 0;
    EXPECT_EQ(std::fabs(std::frexp(value, &e)), 0.5) << value;
  }
}

}  // namespace
}  // namespace attncheck
