// Block-quantized K/V through the C ABI (SPEC 1.2, 5.1): the plugin gets
// kv_dtype Q8_0 / Q4_0 and K, V as ggml lays them out (row r of a tensor
// is dk / 32 consecutive blocks, element offsets in elements as the strides
// count), gaps of a padded layout as blocks of NaN.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attncheck/dtype.h"
#include "host/abi_marshal.h"

namespace attncheck {
namespace {

// K [1][1][2][64] with row stride 96 (a gap of one block per row), V
// contiguous [1][1][2][32]; scale -0.5, integers from t.
Problem block_problem(DType kv) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 2, 64, 32);
  p.kv_dtype = kv;
  p.k.strides = {0, 0, 96, 1};
  p.k.data.assign(2 * 96, std::nan(""));
  const int lo = block_int_min(kv), hi = block_int_max(kv);
  for (int64_t j = 0; j < 2; ++j) {
    for (int64_t t = 0; t < 64; ++t) p.k.at(0, 0, j, t) = -0.5 * (lo + (t + j) % (hi - lo + 1));
    for (int64_t t = 0; t < 32; ++t) p.v.at(0, 0, j, t) = 0.25 * (lo + t % (hi - lo + 1));
  }
  return p;
}

TEST(AbiBlocks, KAndVAreGgmlBlocksAtTheirElementOffsets) {
  for (DType kv : kBlockFormats) {
    const Problem p = block_problem(kv);
    ASSERT_NO_THROW(p.validate());
    const host_detail::MarshalledProblem<2> m(p);
    EXPECT_EQ(m.c.kv_dtype, static_cast<uint32_t>(kv));
    EXPECT_EQ(m.c.q_dtype, ATTNCHECK_F32);
    EXPECT_EQ(m.c.k_strides[2], 96);
    EXPECT_EQ(m.c.k_strides[3], 1);
    const size_t bytes = block_bytes(kv);
    const auto* k = static_cast<const unsigned char*>(m.c.k);
    const auto* v = static_cast<const unsigned char*>(m.c.v);
    for (int64_t j = 0; j < 2; ++j) {
      // Element (0, 0, j, 32 * c) is at element offset 96 j + 32 c: block
      // (96 j + 32 c) / 32.
      for (int64_t c = 0; c < 2; ++c) {
        const Block b = decode_block(kv, k + static_cast<size_t>((96 * j + 32 * c) / 32) * bytes);
        for (int64_t t = 0; t < 32; ++t)
          EXPECT_EQ(b.value(static_cast<size_t>(t)), p.k.at(0, 0, j, 32 * c + t))
              << dtype_name(kv) << " k row " << j << " block " << c << " t " << t;
      }
      // The gap after each row of K: a block of NaN.
      EXPECT_TRUE(std::isnan(decode_block(kv, k + static_cast<size_t>(3 * j + 2) * bytes).scale));
      const Block b = decode_block(kv, v + static_cast<size_t>(j) * bytes);
      for (int64_t t = 0; t < 32; ++t)
        EXPECT_EQ(b.value(static_cast<size_t>(t)), p.v.at(0, 0, j, t));
    }
    // The bytes themselves are the canonical encoding.
    std::vector<unsigned char> first(bytes);
    encode_values(kv, std::span<const double>(p.v.data).subspan(0, 32), first.data());
    EXPECT_EQ(std::memcmp(first.data(), v, bytes), 0);
  }
}

}  // namespace
}  // namespace attncheck
