// ggml's q8_0 and q4_0 blocks: the canonical block of 32 values, its bytes
// against hand-written ones (the nibble order, a negative q4_0 scale), and
// the reference quantizers.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "attncheck/dtype.h"

namespace attncheck {
namespace {

using Values = std::array<double, kBlockValues>;

Values values_of(double scale, const std::array<int, kBlockValues>& ints) {
  Values v{};
  for (int t = 0; t < kBlockValues; ++t) v[t] = scale * ints[t];
  return v;
}

std::vector<unsigned char> bytes_of(DType d, const Values& v) {
  std::vector<unsigned char> out(block_bytes(d));
  encode_values(d, v, out.data());
  return out;
}

TEST(DTypeBlocks, NamesSizesAndRanges) {
  EXPECT_EQ(dtype_name(DType::q8_0), "q8_0");
  EXPECT_EQ(dtype_name(DType::q4_0), "q4_0");
  EXPECT_EQ(static_cast<uint32_t>(DType::q8_0), 6u);
  EXPECT_EQ(static_cast<uint32_t>(DType::q4_0), 7u);
  EXPECT_EQ(block_bytes(DType::q8_0), 34u);
  EXPECT_EQ(block_bytes(DType::q4_0), 18u);
  EXPECT_EQ(block_int_min(DType::q8_0), -128);
  EXPECT_EQ(block_int_max(DType::q4_0), 7);
  EXPECT_TRUE(is_block_format(DType::q4_0));
  EXPECT_FALSE(is_output_format(DType::q8_0));
  EXPECT_EQ(parse_kv_format("q4_0"), DType::q4_0);
  EXPECT_EQ(parse_kv_format("e4m3"), DType::e4m3);
  EXPECT_THROW(parse_format("q8_0"), InputError);
  EXPECT_THROW(parse_kv_format("q5_0"), InputError);
  // Element rounding does not exist for a block format.
  EXPECT_THROW(representable(DType::q8_0, 1.0), std::invalid_argument);
  EXPECT_THROW(round_to(DType::q4_0, 1.0), std::invalid_argument);
}

TEST(DTypeBlocks, Q8_0BytesAreTheF16ScaleThen32Int8) {
  std::array<int, kBlockValues> ints{};
  for (int t = 0; t < kBlockValues; ++t) ints[t] = t % 2 ? -(t + 96) : t + 96;
  ints[0] = 127;  // the largest magnitude takes 127: the canonical shape
  ints[1] = -128;
  const Values v = values_of(0.5, ints);
  const std::vector<unsigned char> b = bytes_of(DType::q8_0, v);
  ASSERT_EQ(b.size(), 34u);
  // Canonical: the value of largest magnitude (-64 at t = 1) gets -128 with
  // a positive scale only when +-127 fails; 127 * s = -64 has no f16 s, so
  // -128 with s = 0.5: f16 0x3800, little-endian.
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x38);
  EXPECT_EQ(b[2], 127);
  EXPECT_EQ(b[3], 0x80);  // -128
  EXPECT_EQ(b[4], 98);
  EXPECT_EQ(b[5], static_cast<unsigned char>(static_cast<int8_t>(-99)));
  const Block back = decode_block(DType::q8_0, b.data());
  for (int t = 0; t < kBlockValues; ++t) EXPECT_EQ(back.value(t), v[t]) << t;
}

TEST(DTypeBlocks, Q4_0NibbleOrderAndNegativeScale) {
  // ggml's shape: d = max / -8, so the value of largest magnitude, 4, is
  // -8 times d = -0.5 (f16 0xb800): a negative scale.
  std::array<int, kBlockValues> ints{};
  for (int t = 0; t < kBlockValues; ++t) ints[t] = (t % 15) - 7;  // -7 .. 7
  ints[0] = -8;
  ints[16] = 7;
  ints[17] = -1;
  const Values v = values_of(-0.5, ints);
  const std::vector<unsigned char> b = bytes_of(DType::q4_0, v);
  ASSERT_EQ(b.size(), 18u);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0xb8);
  // Byte 2 + t: element t (low nibble), element t + 16 (high nibble), each
  // stored as int + 8. t = 0: -8 -> 0x0, 7 -> 0xf.
  EXPECT_EQ(b[2], 0xf0);
  // t = 1: ints[1] = -6 -> 2; ints[17] = -1 -> 7.
  EXPECT_EQ(b[3], 0x72);
  // t = 15: ints[15] = (15 % 15) - 7 = -7 -> 1; ints[31] = (31 % 15) - 7 = -6 -> 2.
  EXPECT_EQ(b[17], 0x21);
  const Block back = decode_block(DType::q4_0, b.data());
  EXPECT_EQ(back.scale, -0.5);
  for (int t = 0; t < kBlockValues; ++t) EXPECT_EQ(back.value(t), v[t]) << t;
}

TEST(DTypeBlocks, ZeroAndNaNBlocksAreCanonical) {
  const Values zeros{};
  for (DType d : kBlockFormats) {
    const std::vector<unsigned char> b = bytes_of(d, zeros);
    const Block back = decode_block(d, b.data());
    EXPECT_EQ(back.scale, 0.0);
    for (int t = 0; t < kBlockValues; ++t) EXPECT_EQ(back.ints[t], 0);
    Values nans;
    nans.fill(std::numeric_limits<double>::quiet_NaN());
    const std::vector<unsigned char> n = bytes_of(d, nans);
    EXPECT_TRUE(std::isnan(decode_block(d, n.data()).value(3)));
  }
  // q8_0 all-zero bytes: scale +0, integers 0.
  const std::vector<unsigned char> b = bytes_of(DType::q8_0, zeros);
  for (unsigned char c : b) EXPECT_EQ(c, 0);
  // q4_0 zero integers are stored as nibble 8.
  const std::vector<unsigned char> q4 = bytes_of(DType::q4_0, zeros);
  for (size_t k = 2; k < q4.size(); ++k) EXPECT_EQ(q4[k], 0x88);
}

TEST(DTypeBlocks, ExactnessIsPerBlock) {
  std::array<int, kBlockValues> ints{};
  ints[3] = 100;
  ints[9] = -3;
  // Near f16's largest finite scale: 65504 * 100 is a block, 65504 * 200 not.
  Values v = values_of(65504.0, ints);
  EXPECT_TRUE(is_exact_block(DType::q8_0, v));
  EXPECT_FALSE(is_exact_block(DType::q4_0, v));  // 100 is no nibble - 8
  v[9] = 65504.0 * 200;
  EXPECT_FALSE(is_exact_block(DType::q8_0, v));
  // Values each representable but with no common f16 scale.
  Values w{};
  w[0] = 1.0;
  w[1] = 0x1p-20;
  EXPECT_FALSE(is_exact_block(DType::q8_0, w));
  EXPECT_THROW(bytes_of(DType::q8_0, w), InputError);
  w[1] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(is_exact_block(DType::q4_0, w));
  // A subnormal f16 scale still makes a block.
  Values s = values_of(0x1p-24, ints);
  EXPECT_TRUE(is_exact_block(DType::q8_0, s));
}

TEST(DTypeBlocks, CanonicalEncodingRoundTripsEveryDrawnBlock) {
  // Every (scale, integers) decodes to the same values after encoding,
  // whichever scale the canonical encoding picks.
  const double scales[] = {1.0, -1.0, 0.25, 3.0, 65504.0, -65504.0, 0x1p-24, 0.1};
  for (DType d : kBlockFormats) {
    for (double s0 : scales) {
      const double s = round_to(DType::f16, s0);
      for (int pattern = 0; pattern < 5; ++pattern) {
        std::array<int, kBlockValues> ints{};
        for (int t = 0; t < kBlockValues; ++t) {
          const int span = block_int_max(d) - block_int_min(d) + 1;
          ints[t] = block_int_min(d) + (t * 7 + pattern * 13) % span;
        }
        const Values v = values_of(s, ints);
        const std::vector<unsigned char> b = bytes_of(d, v);
        const Block back = decode_block(d, b.data());
        for (int t = 0; t < kBlockValues; ++t)
          EXPECT_EQ(back.value(t), v[t]) << dtype_name(d) << " scale " << s << " t " << t;
        std::vector<unsigned char> again(block_bytes(d));
        encode_block(d, back, again.data());
        EXPECT_EQ(again, b);
      }
    }
  }
}

TEST(DTypeBlocks, RoundBlockIsGgmlsReferenceQuantizer) {
  Values x{};
  for (int t = 0; t < kBlockValues; ++t) x[t] = (t - 10) * 0.3;
  // q8_0: amax = 6.3 (t = 31), d = amax / 127 in f32.
  const Block q8 = round_block(DType::q8_0, x);
  const float d8 = static_cast<float>(x[31]) / 127.0f;
  EXPECT_EQ(q8.scale, round_to(DType::f16, d8));
  EXPECT_EQ(q8.ints[31], 127);
  EXPECT_EQ(q8.ints[10], 0);
  EXPECT_EQ(q8.ints[0], static_cast<int>(std::round(static_cast<float>(x[0]) * (1.0f / d8))));
  // q4_0: max = 6.3 (largest magnitude, positive), d = -6.3 / 8 < 0, and
  // that value gets nibble 0 (-8).
  const Block q4 = round_block(DType::q4_0, x);
  EXPECT_LT(q4.scale, 0);
  EXPECT_EQ(q4.ints[31], -8);
  EXPECT_TRUE(is_exact_block(DType::q4_0, values_of(q4.scale, q4.ints)));
  // A zero block stays zero.
  const Block z = round_block(DType::q4_0, Values{});
  EXPECT_EQ(z.scale, 0.0);
  // Rounding a row keeps exact blocks exact.
  std::vector<double> row(64);
  for (size_t t = 0; t < row.size(); ++t) row[t] = std::sin(static_cast<double>(t));
  round_row_to_blocks(DType::q8_0, row);
  EXPECT_TRUE(is_exact_block(DType::q8_0, std::span<const double>(row).subspan(0, 32)));
  EXPECT_TRUE(is_exact_block(DType::q8_0, std::span<const double>(row).subspan(32, 32)));
  // A last partial block rounds as if padded with zeros.
  std::vector<double> ragged(33, 0.0);
  ragged[32] = 3.0;
  round_row_to_blocks(DType::q8_0, ragged);
  EXPECT_EQ(ragged[32], round_to(DType::f16, 3.0f / 127.0f) * 127);
}

}  // namespace
}  // namespace attncheck
