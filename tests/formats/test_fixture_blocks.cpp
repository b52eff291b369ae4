// Problem files with block-quantized K/V (SPEC 1.2, 5.3): kv_dtype "q8_0"
// and "q4_0" round-trip bit-exactly, their blocks' bytes replay the same
// through the canonical encoding, and a file whose K/V values are no block,
// or that names a block format for q or the output, is one line naming
// the field.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attncheck/dtype.h"
#include "formats/json.h"

namespace attncheck {
namespace {

using nlohmann::json;

// f32 q and output, K/V in `kv`: blocks with a negative scale, the extreme
// integers, a zero block and a scale at f16's largest finite.
Problem block_problem(DType kv) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 2, 3, 32, 32);
  p.kv_dtype = kv;
  for (size_t k = 0; k < p.q.data.size(); ++k) p.q.data[k] = 0.5 * static_cast<double>(k % 7);
  const int lo = block_int_min(kv), hi = block_int_max(kv);
  for (int64_t j = 0; j < p.tk; ++j)
    for (int64_t t = 0; t < 32; ++t) {
      const double scale = j == 0 ? -0.375 : j == 1 ? 65504.0 : 0.0;
      const int q = t == 0 ? lo : t == 1 ? hi : static_cast<int>(t % (hi + 1));
      p.k.at(0, 0, j, t) = scale * q;
      p.v.at(0, 0, j, t) = -scale * q / 1024;
    }
  return p;
}

std::vector<unsigned char> block_bytes_of(DType kv, const std::vector<double>& values) {
  std::vector<unsigned char> out;
  for (size_t start = 0; start < values.size(); start += kBlockValues) {
    std::vector<unsigned char> b(block_bytes(kv));
    encode_values(kv, std::span<const double>(values).subspan(start, kBlockValues), b.data());
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

TEST(FixtureBlocks, RoundTripsBitExactlyAndReplaysTheSameBytes) {
  for (DType kv : kBlockFormats) {
    const Problem p = block_problem(kv);
    ASSERT_NO_THROW(p.validate()) << dtype_name(kv);
    const json j = problem_to_json(p);
    EXPECT_EQ(j["kv_dtype"], std::string(dtype_name(kv)));
    const Problem back = problem_from_json(json::parse(j.dump()), "blocks.json");
    ASSERT_EQ(back.kv_dtype, kv);
    EXPECT_EQ(block_bytes_of(kv, back.k.data), block_bytes_of(kv, p.k.data));
    EXPECT_EQ(block_bytes_of(kv, back.v.data), block_bytes_of(kv, p.v.data));
    for (size_t k = 0; k < p.k.data.size(); ++k) EXPECT_EQ(back.k.data[k], p.k.data[k]);
  }
}

std::string load_error(const json& j) {
  try {
    problem_from_json(j, "blocks.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(FixtureBlocks, MalformedFilesAreOneLineNamingTheField) {
  json j = problem_to_json(block_problem(DType::q4_0));
  json not_a_block = j;
  not_a_block["k"][3] = 0.1;
  const std::string e = load_error(not_a_block);
  EXPECT_NE(e.find("not one q4_0 block"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  json q_block = j;
  q_block["q_dtype"] = "q8_0";
  EXPECT_NE(load_error(q_block).find("q_dtype"), std::string::npos);
  EXPECT_NE(load_error(q_block).find("block format for K/V only"), std::string::npos)
      << load_error(q_block);
  json out_block = j;
  out_block["dtype"] = "q4_0";
  EXPECT_NE(load_error(out_block).find("block format for K/V only"), std::string::npos)
      << load_error(out_block);
  json unknown = j;
  unknown["kv_dtype"] = "q5_0";
  EXPECT_NE(load_error(unknown).find("q8_0 or q4_0"), std::string::npos) << load_error(unknown);
}

}  // namespace
}  // namespace attncheck
