// The broken catalog under the default CI profile: every broken
// implementation is caught by the property made for it, and the shrunk
// counterexamples are small. Prints the table of sizes and the time each
// search and shrink took (a figure, never a timed assertion).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "tests/impls/block_twins.h"
#include "tests/impls/size_dependent_twins.h"

namespace attncheck {
namespace {

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

TEST(BrokenCatalog, EveryBugIsCaughtWithASmallCounterexample) {
  RunConfig config;
  config.seed = kDefaultSeed;
  std::vector<double> tq, tk, dk, seconds;
  int caught = 0, total = 0;
  fmt::print("{:<36} {:<28} {:>7} {:>3} {:>3} {:>3} {:>3} {:>8}\n", "implementation", "property",
             "status", "bh", "tq", "tk", "dk", "seconds");
  for (const auto& impl : registered_impls()) {
    const ImplInfo& info = impl->info();
    if (info.kind != Kind::broken) continue;
    // Caught only with real sizes: test_broken_at_size.
    if (test_support::caught_only_at_real_size(info.name)) continue;
    // Two-block bugs (block_twins.h): the real-size phase, when it is on.
    if (test_support::needs_two_blocks(info.name) && !real_sizes_enabled()) continue;
    const PropertyDef* prop = find_property_def(info.caught_by);
    ASSERT_NE(prop, nullptr) << info.name << ": unknown property " << info.caught_by;
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      if (!info.supports_output(d)) continue;
      ++total;
      const auto start = std::chrono::steady_clock::now();
      const PropertyOutcome o = run_property(*prop, *impl, d, config);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_EQ(o.status, PropertyStatus::failed) << info.name << " escaped " << prop->name;
      if (o.status != PropertyStatus::failed) continue;
      ++caught;
      seconds.push_back(s);
      if (!o.counterexample) {  // statistical properties have no single case
        fmt::print("{:<36} {:<28} {:>7} {:>19} {:8.3f}\n", info.name, prop->name, "caught",
                   "(statistical)", s);
        continue;
      }
      const auto& c = *o.counterexample;
      tq.push_back(static_cast<double>(c.tq));
      tk.push_back(static_cast<double>(c.tk));
      dk.push_back(static_cast<double>(c.dk));
      fmt::print("{:<36} {:<28} {:>7} {:>3} {:>3} {:>3} {:>3} {:8.3f}\n", info.name, prop->name,
                 "caught", c.batch * c.heads, c.tq, c.tk, c.dk, s);
    }
  }
  ASSERT_FALSE(tq.empty());
  fmt::print("caught {} of {}; median shrunk counterexample: tq {}, tk {}, dk {}; median time to "
             "find and shrink {:.3f} s, slowest {:.3f} s\n",
             caught, total, median(tq), median(tk), median(dk), median(seconds),
             *std::max_element(seconds.begin(), seconds.end()));
  EXPECT_EQ(caught, total);
  EXPECT_LE(median(tq), 2);
  EXPECT_LE(median(tk), 2);
  EXPECT_EQ(median(dk), 1);
}

}  // namespace
}  // namespace attncheck
