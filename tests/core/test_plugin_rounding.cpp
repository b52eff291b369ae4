// plugin.h's rounding helpers (attncheck_round_bf16 / _f16 and the bit
// conversions) agree with the harness's own round_to on every float of a
// strided sweep of all 2^32 patterns, and on the edges: ties, the largest
// finite values and the first ones to overflow, subnormals, zeros,
// infinities and NaN.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "attncheck/dtype.h"
#include "attncheck/plugin.h"

namespace attncheck {
namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void expect_agrees(float x) {
  const float bf = attncheck_round_bf16(x), h = attncheck_round_f16(x);
  const double want_bf = round_to(DType::bf16, x), want_h = round_to(DType::f16, x);
  if (std::isnan(x)) {
    EXPECT_TRUE(std::isnan(bf) && std::isnan(h)) << x;
    return;
  }
  // == treats -0 and +0 alike: the signs are compared too.
  EXPECT_TRUE(bf == want_bf && std::signbit(bf) == std::signbit(want_bf))
      << "bf16 of " << x << " (bits " << std::hex << attncheck_bf16_bits(x) << "): " << bf
      << ", round_to: " << want_bf;
  EXPECT_TRUE(h == want_h && std::signbit(h) == std::signbit(want_h))
      << "f16 of " << x << " (bits " << std::hex << attncheck_f16_bits(x) << "): " << h
      << ", round_to: " << want_h;
}

TEST(PluginRounding, AgreesWithTheHarnessOnASweepOfEveryFloat) {
  // A stride prime to 2^32 visits patterns of every exponent and sign.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) expect_agrees(from_bits(static_cast<uint32_t>(u)));
}

TEST(PluginRounding, AgreesAtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x :
       {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
        65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f,         // f16's largest and overflow
        1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 2048,   // bf16 and f16 ties
        1.0f + 3.0f / 2048, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24),
        std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::ldexp(3.0f, -25),
        std::ldexp(1.0f, -26), std::ldexp(1.0f, -126), std::ldexp(1.0f, -149),
        std::numeric_limits<float>::max(), from_bits(0x7f7fffffu), from_bits(0x477fefffu)}) {
    expect_agrees(x);
  }
}

TEST(PluginRounding, BitsRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float h = attncheck_f16_value(bits), bf = attncheck_bf16_value(bits);
    if (!std::isnan(h)) {
      EXPECT_EQ(attncheck_f16_bits(h), bits) << b;
    }
    if (!std::isnan(bf)) {
      EXPECT_EQ(attncheck_bf16_bits(bf), bits) << b;
    }
  }
}

}  // namespace
}  // namespace attncheck
