// Problems with block-quantized K/V (SPEC 1.2): dk and dv multiples of 32,
// strides in whole blocks, every block exact, no backward, and the block
// formats nowhere but K/V.

#include <gtest/gtest.h>

#include <string>

#include "attncheck/dtype.h"
#include "attncheck/problem.h"

namespace attncheck {
namespace {

// A valid problem: f32 output and q, K/V in `kv`, K and V exact blocks of
// small integers with scale 1/4 (a zero block at key 0).
Problem block_problem(DType kv, int64_t dk = 64, int64_t dv = 32) {
  Problem p = Problem::zeros(DType::f32, 1, 2, 1, 3, 4, dk, dv);
  p.kv_dtype = kv;
  for (size_t k = 0; k < p.q.data.size(); ++k) p.q.data[k] = static_cast<double>(k % 5) - 2;
  for (Tensor* t : {&p.k, &p.v}) {
    const int64_t width = t == &p.k ? dk : dv;
    for (size_t k = static_cast<size_t>(width); k < t->data.size(); ++k)
      t->data[k] = 0.25 * (static_cast<double>(k % 15) - 7);
  }
  return p;
}

std::string validation_error(const Problem& p) {
  try {
    p.validate();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ProblemBlocks, ExactBlocksValidate) {
  for (DType kv : kBlockFormats) {
    EXPECT_EQ(validation_error(block_problem(kv)), "") << dtype_name(kv);
    EXPECT_TRUE(block_problem(kv).needs_abi_v2());
  }
}

TEST(ProblemBlocks, HeadDimensionsAreWholeBlocks) {
  EXPECT_NE(validation_error(block_problem(DType::q8_0, 48, 32)).find(
                "k: head dimension 48 is not a multiple of 32"),
            std::string::npos);
  EXPECT_NE(validation_error(block_problem(DType::q4_0, 32, 16)).find(
                "v: head dimension 16 is not a multiple of 32"),
            std::string::npos);
}

TEST(ProblemBlocks, StridesCountWholeBlocks) {
  Problem p = block_problem(DType::q8_0);
  // Rows padded by one element: no longer whole blocks.
  Tensor padded;
  padded.strides = {0, 0, 65, 1};  // batch and kv_heads are 1
  padded.data.assign(static_cast<size_t>(4 * 65), 0.0);
  p.k = padded;
  EXPECT_NE(validation_error(p).find("k: stride 2 is 65, not a multiple of 32"),
            std::string::npos)
      << validation_error(p);
  // Padded by a whole block: valid.
  padded.strides = {0, 0, 96, 1};
  padded.data.assign(static_cast<size_t>(4 * 96), 0.0);
  p.k = padded;
  EXPECT_EQ(validation_error(p), "");
}

TEST(ProblemBlocks, EveryBlockIsExact) {
  Problem p = block_problem(DType::q4_0);
  // 9 * 0.25: no nibble - 8 reaches 9 with a scale that also gives the
  // block's other quarters.
  p.v.at(0, 0, 2, 5) = 0.25 * 9;
  p.v.at(0, 0, 2, 6) = 0.25;
  EXPECT_NE(validation_error(p).find("v[0][0][2][0..31]: not one q4_0 block"), std::string::npos)
      << validation_error(p);
  Problem q = block_problem(DType::q8_0);
  q.k.at(0, 0, 1, 40) = 0x1p-30;  // no f16 scale reaches it and the block's 1.75
  EXPECT_NE(validation_error(q).find("k[0][0][1][32..63]: not one q8_0 block"),
            std::string::npos)
      << validation_error(q);
}

TEST(ProblemBlocks, NoBackwardAndNowhereButKV) {
  Problem p = block_problem(DType::q8_0);
  p.dout.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
  EXPECT_NE(validation_error(p).find("dout: K/V in q8_0 has no backward"), std::string::npos);
  Problem q = block_problem(DType::q8_0);
  q.q_dtype = DType::q8_0;
  EXPECT_NE(validation_error(q).find("q_dtype: q8_0 is a K/V format only"), std::string::npos);
  Problem o = block_problem(DType::q8_0);
  o.dtype = DType::q4_0;
  EXPECT_NE(validation_error(o).find("dtype: q4_0 is an input format only"), std::string::npos);
}

}  // namespace
}  // namespace attncheck
