// Problem transforms: GQA expanded to MHA, and V = I.

#include "core/transforms.h"

#include <gtest/gtest.h>

namespace attncheck {
namespace {

// heads 4 over kv_heads 2, K and V entries naming their (b, g, j, d).
Problem grouped() {
  Problem p = Problem::zeros(DType::f64, 2, 4, 2, 3, 2, 2, 1);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d) p.k.at(b, g, j, d) = 1000 * b + 100 * g + 10 * j + d;
        p.v.at(b, g, j, 0) = -(1000 * b + 100 * g + 10 * j);
      }
  p.causal = true;
  p.window_left = 1;
  p.scale = 0.5;
  return p;
}

TEST(Transforms, ExpandKvHeadsRepeatsEachKvHeadForItsGroup) {
  const Problem p = grouped();
  const Problem m = expand_kv_heads(p);
  EXPECT_EQ(m.kv_heads, p.heads);
  EXPECT_NO_THROW(m.validate());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t j = 0; j < p.tk; ++j) {
        EXPECT_EQ(m.kv_head(h), h);
        for (int64_t d = 0; d < p.dk; ++d) EXPECT_EQ(m.k.at(b, h, j, d), p.k.at(b, h / 2, j, d));
        EXPECT_EQ(m.v.at(b, h, j, 0), p.v.at(b, h / 2, j, 0));
      }
  EXPECT_EQ(m.causal, p.causal);
  EXPECT_EQ(m.window_left, p.window_left);
  EXPECT_EQ(m.scale, p.scale);
  // Another mapping: query head h reads K/V head h % kv_heads.
  const Problem t = expand_kv_heads(p, [](const Problem& q, int64_t h) { return h % q.kv_heads; });
  EXPECT_EQ(t.k.at(1, 1, 0, 0), p.k.at(1, 1, 0, 0));
  EXPECT_EQ(t.k.at(1, 2, 0, 0), p.k.at(1, 0, 0, 0));
}

TEST(Transforms, IdentityValuesMakeTheOutputTheWeights) {
  Problem p = grouped();
  p.dout.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 1.0);
  const Problem q = with_identity_values(p);
  EXPECT_EQ(q.dv, p.tk);
  EXPECT_TRUE(q.dout.empty());
  EXPECT_NO_THROW(q.validate());
  for (int64_t j = 0; j < p.tk; ++j)
    for (int64_t d = 0; d < p.tk; ++d) EXPECT_EQ(q.v.at(1, 1, j, d), j == d ? 1.0 : 0.0);
}

}  // namespace
}  // namespace attncheck
