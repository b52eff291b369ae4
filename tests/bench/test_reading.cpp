// The bench's readings take every name from the sweep (its series,
// baseline and targets), and growth fitting recovers a power law's
// exponent. No process is started and nothing is timed.

#include <gtest/gtest.h>

#include <cmath>

#include "bench/fit.h"
#include "bench/reading.h"

namespace attncheck::bench {
namespace {

Point point(const std::string& label, int64_t seq, double median_s, int64_t peak_bytes) {
  Point p;
  p.spec.subject = label;
  p.spec.label = label;
  p.spec.seq = seq;
  p.result.median_s = median_s;
  p.result.median_cpu_s = median_s;
  p.result.flops = 1e9 * median_s;
  p.result.peak_bytes = peak_bytes;
  return p;
}

Series series(const std::string& label) {
  Series s;
  s.subject = label;
  s.label = label;
  return s;
}

TEST(Growth, RecoversThePowerOfT) {
  std::vector<std::pair<double, double>> quadratic;
  for (double t : {64.0, 128.0, 256.0}) quadratic.emplace_back(t, 3 * t * t);
  ASSERT_TRUE(growth(quadratic).has_value());
  EXPECT_NEAR(*growth(quadratic), 2.0, 1e-12);
  EXPECT_FALSE(growth({{64.0, 1.0}}).has_value());
  EXPECT_EQ(slope_text(std::nullopt), "n/a");
  EXPECT_EQ(slope_text(1.004), "T^1.00");
}

TEST(Reading, SpeedupComparesEverySeriesWithThePresetsBaseline) {
  Sweep sw;
  sw.name = "custom";
  sw.reading = Reading::speedup;
  sw.seqs = {8};
  sw.series = {series("slow_impl"), series("fast_impl")};
  sw.baseline = "slow_impl";
  const std::vector<Point> points = {point("slow_impl", 8, 2.0, 2 << 20), point("fast_impl", 8, 1.0, 1 << 20)};
  const auto lines = read_sweep(sw, points, Machine{});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "T=8: fast_impl 2.0x faster than slow_impl; peak memory 1.0 vs 2.0 MiB");
}

TEST(Reading, TargetsNameTheirSeriesAndBaseline) {
  Sweep sw;
  sw.name = "targets";
  sw.reading = Reading::targets;
  sw.seqs = {16, 32};
  sw.series = {series("base"), series("other")};
  sw.baseline = "base";
  sw.target_seq = 32;
  Target within;
  within.kind = Target::Kind::within;
  within.label = "other";
  within.factor = 1.5;
  Target missing;
  missing.label = "absent";
  missing.missing = "not built?";
  sw.targets = {within, missing};
  Machine m;
  m.peak_gflops = m.avx2_peak_gflops = 10;
  const std::vector<Point> points = {point("base", 32, 1.0, 0), point("other", 32, 1.2, 0)};
  const auto lines = read_sweep(sw, points, m);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("base at T=32: CPU 1.000 s, 1.0 GFLOP/s = 10% of", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1], "target other <= 1.5 x base at T=32: wall 1.20x: met; CPU 1.20x: met");
  EXPECT_EQ(lines[2], "absent not measured (not built?)");
}

}  // namespace
}  // namespace attncheck::bench
