// Tests of the high-precision oracle: the worked exercise, exactly
// computable cases, and every feature of SPEC section 1 against a naive
// double computation written independently here.

#include "attncheck/oracle.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace attncheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Exercise 1: Q = K = I, V = [[2, 0], [0, 4]], dk = 2, default scale.
Problem exercise1() {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 2, 2, 2);
  p.q.data = {1, 0, 0, 1};
  p.k.data = {1, 0, 0, 1};
  p.v.data = {2, 0, 0, 4};
  return p;
}

// A problem filled with reproducible values in [-1.5, 1.5].
Problem random_problem(uint64_t seed, int64_t batch, int64_t heads,
                       int64_t kv_heads, int64_t tq, int64_t tk, int64_t dk,
                       int64_t dv) {
  Problem p =
      Problem::zeros(DType::f64, batch, heads, kv_heads, tq, tk, dk, dv);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  for (auto* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = u(rng);
  return p;
}

std::vector<uint8_t> random_flags(uint64_t seed, size_t n, double p_one) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution d(p_one);
  std::vector<uint8_t> out(n);
  for (auto& x : out) x = d(rng) ? 1 : 0;
  return out;
}

struct Naive {
  std::vector<double> out, weights, lse;
  std::vector<int64_t> allowed;  // per row
  std::vector<uint8_t> ok;       // per score element
};

// The textbook computation in double, deliberately not using Problem's
// helpers (allowed, kv_head, position, bias_at) so that it checks them too.
Naive naive(const Problem& p) {
  Naive r;
  r.out.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
  r.weights.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.tk), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads * p.tq), -kInf);
  r.allowed.assign(r.lse.size(), 0);
  r.ok.assign(r.weights.size(), 0);
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < p.tq; ++i) {
        const int64_t pos = p.align == Align::top_left ? i : i + p.tk - p.tq;
        std::vector<double> s(static_cast<size_t>(p.tk));
        std::vector<bool> ok(static_cast<size_t>(p.tk));
        double m = -kInf;
        for (int64_t j = 0; j < p.tk; ++j) {
          bool allowed = true;
          if (!p.key_valid.empty()) allowed &= p.key_valid[b * p.tk + j] == 1;
          if (p.causal) allowed &= j <= pos;
          if (p.window_left >= 0) allowed &= j >= pos - p.window_left;
          if (p.window_right >= 0) allowed &= j <= pos + p.window_right;
          if (p.mask) {
            const auto& mk = *p.mask;
            const int64_t bb = mk.batch == 1 ? 0 : b,
                          hh = mk.heads == 1 ? 0 : h;
            allowed &=
                mk.data[((bb * mk.heads + hh) * p.tq + i) * p.tk + j] == 1;
          }
          long double dot = 0;
          for (int64_t t = 0; t < p.dk; ++t) {
            dot += static_cast<long double>(p.q.at(b, h, i, t)) *
                   p.k.at(b, g, j, t);
          }
          double x = static_cast<double>(p.scale * dot);
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          if (p.bias) {
            const auto& bs = *p.bias;
            const int64_t bb = bs.batch == 1 ? 0 : b,
                          hh = bs.heads == 1 ? 0 : h;
            x += bs.data[((bb * bs.heads + hh) * p.tq + i) * p.tk + j];
          }
          s[j] = x;
          ok[j] = allowed;
          r.ok[((b * p.heads + h) * p.tq + i) * p.tk + j] = allowed ? 1 : 0;
          if (allowed) m = std::max(m, x);
        }
        const size_t row = (b * p.heads + h) * p.tq + i;
        int64_t n = 0;
        double l = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          if (ok[j]) {
            l += std::exp(s[j] - m);
            ++n;
          }
        }
        r.allowed[row] = n;
        if (n == 0) continue;
        r.lse[row] = m + std::log(l);
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!ok[j]) continue;
          const double a = std::exp(s[j] - m) / l;
          r.weights[row * p.tk + j] = a;
          for (int64_t d = 0; d < p.dv; ++d) {
            r.out[row * p.dv + d] += a * p.v.at(b, g, j, d);
          }
        }
      }
    }
  }
  return r;
}

void expect_close(const std::vector<double>& got,
                  const std::vector<double>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i])))
          << what << "[" << i << "]";
    }
  }
}

// Checks the oracle against the naive computation, that disallowed weights
// are exactly zero and that the row bookkeeping agrees.
void expect_matches_naive(const Problem& p) {
  p.validate();
  const OracleResult r = oracle(p);
  const Naive n = naive(p);
  expect_close(r.out, n.out, 1e-12, "out");
  expect_close(r.weights, n.weights, 1e-12, "weights");
  expect_close(r.lse, n.lse, 1e-12, "lse");
  ASSERT_EQ(r.row_allowed, n.allowed);
  for (size_t row = 0; row < r.lse.size(); ++row) {
    EXPECT_EQ(r.row_empty[row], n.allowed[row] == 0 ? 1 : 0);
    for (int64_t j = 0; j < p.tk; ++j) {
      const size_t w = row * p.tk + j;
      if (!n.ok[w]) {
        EXPECT_EQ(r.weights[w], 0.0) << "weight " << w;
      }
    }
  }
}

// True when at least one weight is forced to zero, so a feature was active.
bool some_key_disallowed(const Problem& p) {
  const OracleResult r = oracle(p);
  for (int64_t n : r.row_allowed)
    if (n < p.tk) return true;
  return false;
}

TEST(Oracle, Exercise1MatchesTheWorkedNumbers) {
  const OracleResult r = oracle(exercise1());
  const std::vector<double> weights{0.6698, 0.3302, 0.3302, 0.6698};
  const std::vector<double> out{1.3395, 1.3210, 0.6605, 2.6790};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(r.weights[i], weights[i], 5e-5) << i;
    EXPECT_NEAR(r.out[i], out[i], 5e-5) << i;
  }
  // lse = log(e^{1/sqrt 2} + e^0) for both rows.
  EXPECT_NEAR(r.lse[0], 1.1079, 5e-5);
  EXPECT_NEAR(r.lse[1], 1.1079, 5e-5);
  EXPECT_TRUE(r.empty_rows.empty());
  EXPECT_EQ(r.scores[0], Problem::default_scale(2));
  EXPECT_EQ(r.scores[1], 0.0);
}

TEST(Oracle, AsymmetricScoresAreNormalisedOverKeys) {
  // Q = I, K rows [1,0], [2,1], [0,3]: the scores [[1,2,0],[0,1,3]] / sqrt 2
  // normalised over the query axis would give other weights.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 3, 2, 2);
  p.q.data = {1, 0, 0, 1};
  p.k.data = {1, 0, 2, 1, 0, 3};
  p.v.data = {1, 2, 3, -1, 0, 5};
  const OracleResult r = oracle(p);
  const std::vector<double> weights{0.2840, 0.5760, 0.1400,
                                    0.0879, 0.1784, 0.7337};
  const std::vector<double> out{2.0119, 0.6922, 0.6231, 3.6659};
  for (size_t i = 0; i < weights.size(); ++i)
    EXPECT_NEAR(r.weights[i], weights[i], 5e-5);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(r.out[i], out[i], 5e-5);
  EXPECT_NEAR(r.lse[0], 1.9659, 5e-5);
  EXPECT_NEAR(r.lse[1], 2.4310, 5e-5);
  expect_matches_naive(p);
}

TEST(Oracle, EqualScoresGiveExactlyUniformWeightsAndTheMean) {
  for (int64_t n : {2, 4}) {
    Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, n, 3, 2);
    // q = 0 makes every score 0.
    for (int64_t j = 0; j < n; ++j) {
      p.k.at(0, 0, j, 0) = 0.5 * static_cast<double>(j + 1);
      p.v.at(0, 0, j, 0) = static_cast<double>(j + 1);
      p.v.at(0, 0, j, 1) = -3.0 * static_cast<double>(j);
    }
    const OracleResult r = oracle(p);
    double mean0 = 0, mean1 = 0;
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(r.weights[j], 1.0 / static_cast<double>(n));
      mean0 += p.v.at(0, 0, j, 0);
      mean1 += p.v.at(0, 0, j, 1);
    }
    EXPECT_EQ(r.out[0], mean0 / static_cast<double>(n));
    EXPECT_EQ(r.out[1], mean1 / static_cast<double>(n));
    EXPECT_EQ(r.lse[0], std::log(static_cast<double>(n)));
    EXPECT_EQ(r.row_max[0], 0.0);
    EXPECT_EQ(r.row_sum[0], static_cast<double>(n));
  }
}

TEST(Oracle, ResultsAreRoundedToNearest) {
  // 1/5 lies above the double below 0.2 by more than half an ulp: the
  // nearest double is the literal 0.2, truncation would give the one below.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 5, 1, 1);
  p.v.data = {1, 0, 0, 0, 0};
  const OracleResult r = oracle(p);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(r.weights[j], 0.2);
  EXPECT_EQ(r.out[0], 0.2);
  // The premise: 1/5 lies strictly between the two doubles around it.
  EXPECT_GT(static_cast<long double>(0.2), 1.0L / 5.0L);
  EXPECT_LT(static_cast<long double>(std::nextafter(0.2, 0.0)), 1.0L / 5.0L);
}

TEST(Oracle, OneAllowedKeyGetsWeightExactlyOne) {
  Problem p = random_problem(7, 1, 1, 1, 3, 4, 2, 3);
  p.key_valid = {0, 0, 1, 0};
  const OracleResult r = oracle(p);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(r.weights[weight_index(p, 0, 0, i, j)], j == 2 ? 1.0 : 0.0);
    }
    for (int64_t d = 0; d < 3; ++d) {
      EXPECT_EQ(r.out[out_index(p, 0, 0, i, d)], p.v.at(0, 0, 2, d));
    }
    // lse = s of the one key.
    EXPECT_EQ(r.lse[i], r.scores[weight_index(p, 0, 0, i, 2)]);
    EXPECT_EQ(r.row_allowed[i], 1);
  }
}

TEST(Oracle, NoFeaturesMatchesNaive) {
  expect_matches_naive(random_problem(1, 2, 2, 2, 5, 6, 4, 3));
}

TEST(Oracle, KeyPaddingMatchesNaive) {
  Problem p = random_problem(2, 3, 2, 2, 4, 7, 3, 2);
  p.key_valid = random_flags(20, 3 * 7, 0.6);
  p.key_valid[0] = 1;
  EXPECT_TRUE(some_key_disallowed(p));
  expect_matches_naive(p);
}

TEST(Oracle, ExplicitMaskWithBroadcastingMatchesNaive) {
  // [1, H, tq, tk], [B, 1, tq, tk], [1, 1, tq, tk] and [B, H, tq, tk].
  for (auto [mb, mh] : {std::pair{1, 3}, {2, 1}, {1, 1}, {2, 3}}) {
    Problem p = random_problem(3, 2, 3, 3, 5, 4, 2, 2);
    Broadcast<uint8_t> m;
    m.batch = mb;
    m.heads = mh;
    m.data = random_flags(30 + mb * 10 + mh,
                          static_cast<size_t>(mb * mh * 5 * 4), 0.6);
    p.mask = m;
    EXPECT_TRUE(some_key_disallowed(p));
    expect_matches_naive(p);
  }
}

TEST(Oracle, BiasMatchesNaive) {
  for (auto [bb, bh] : {std::pair{1, 2}, {2, 1}, {2, 2}}) {
    Problem p = random_problem(4, 2, 2, 1, 3, 5, 4, 2);
    Broadcast<double> bias;
    bias.batch = bb;
    bias.heads = bh;
    std::mt19937_64 rng(40 + bb * 10 + bh);
    std::uniform_real_distribution<double> u(-3, 3);
    bias.data.resize(static_cast<size_t>(bb * bh * 3 * 5));
    for (double& x : bias.data) x = u(rng);
    p.bias = bias;
    expect_matches_naive(p);
  }
}

TEST(Oracle, SoftcapMatchesNaive) {
  Problem p = random_problem(5, 1, 2, 2, 4, 4, 8, 2);
  for (double& x : p.q.data) x *= 8;  // scores well beyond the cap
  p.softcap = 2.5;
  Broadcast<double> bias;
  bias.data.assign(16, 0.25);  // bias after the cap may exceed it
  p.bias = bias;
  const OracleResult r = oracle(p);
  for (size_t w = 0; w < r.scores.size(); ++w) {
    EXPECT_LE(std::fabs(r.scores[w] - 0.25), 2.5);
  }
  expect_matches_naive(p);
}

TEST(Oracle, GroupedQueryAttentionMatchesNaive) {
  Problem p = random_problem(6, 2, 4, 2, 3, 5, 3, 4);
  expect_matches_naive(p);
  // Heads 0, 1 read K/V head 0; heads 2, 3 read K/V head 1: equal queries
  // in heads 0 and 1 give equal rows, in heads 1 and 2 (in general) not.
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t t = 0; t < 3; ++t)
      p.q.at(0, 1, i, t) = p.q.at(0, 2, i, t) = p.q.at(0, 0, i, t);
  const OracleResult r = oracle(p);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t d = 0; d < 4; ++d) {
      EXPECT_EQ(r.out[out_index(p, 0, 0, i, d)],
                r.out[out_index(p, 0, 1, i, d)]);
      EXPECT_NE(r.out[out_index(p, 0, 1, i, d)],
                r.out[out_index(p, 0, 2, i, d)]);
    }
  }
}

TEST(Oracle, CausalMatchesNaiveForBothAlignments) {
  for (auto [tq, tk] : {std::pair{3, 6}, {6, 3}, {4, 4}}) {
    for (Align a : {Align::top_left, Align::bottom_right}) {
      Problem p = random_problem(8, 1, 2, 1, tq, tk, 3, 2);
      p.causal = true;
      p.align = a;
      EXPECT_TRUE(some_key_disallowed(p));
      expect_matches_naive(p);
    }
  }
  // Top-left, tq > tk: query i >= tk sees all keys; bottom-right, tq > tk:
  // the first tq - tk queries see none.
  Problem p = random_problem(9, 1, 1, 1, 5, 3, 2, 2);
  p.causal = true;
  p.align = Align::bottom_right;
  const OracleResult r = oracle(p);
  EXPECT_EQ(r.row_allowed, (std::vector<int64_t>{0, 0, 1, 2, 3}));
  p.align = Align::top_left;
  EXPECT_EQ(oracle(p).row_allowed, (std::vector<int64_t>{1, 2, 3, 3, 3}));
}

TEST(Oracle, SlidingWindowMatchesNaiveForBothAlignments) {
  for (auto [left, right] : {std::pair{1, 0}, {2, -1}, {-1, 1}, {0, 2}}) {
    for (Align a : {Align::top_left, Align::bottom_right}) {
      Problem p = random_problem(10, 2, 1, 1, 4, 7, 3, 2);
      p.window_left = left;
      p.window_right = right;
      p.align = a;
      EXPECT_TRUE(some_key_disallowed(p));
      expect_matches_naive(p);
    }
  }
  Problem p = random_problem(11, 1, 1, 1, 2, 6, 2, 2);
  p.window_left = 1;
  p.window_right = 0;
  p.align = Align::bottom_right;  // positions 4, 5
  const OracleResult r = oracle(p);
  EXPECT_EQ(r.row_allowed, (std::vector<int64_t>{2, 2}));
  EXPECT_GT(r.weights[weight_index(p, 0, 0, 0, 3)], 0.0);
  EXPECT_GT(r.weights[weight_index(p, 0, 0, 0, 4)], 0.0);
  EXPECT_EQ(r.weights[weight_index(p, 0, 0, 0, 5)], 0.0);
}

TEST(Oracle, AllFeaturesTogetherMatchNaive) {
  Problem p = random_problem(12, 2, 4, 2, 5, 6, 3, 2);
  p.key_valid = random_flags(120, 12, 0.8);
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 3;
  Broadcast<uint8_t> m;
  m.heads = 4;
  m.data = random_flags(121, 4 * 5 * 6, 0.8);
  p.mask = m;
  Broadcast<double> bias;
  bias.batch = 2;
  bias.data.assign(2 * 5 * 6, -0.75);
  p.bias = bias;
  p.softcap = 1.5;
  p.scale = -0.3;
  expect_matches_naive(p);
}

TEST(Oracle, NonDefaultScaleMatchesNaive) {
  for (double scale : {0.125, 1.0, 3.0, -0.7}) {
    Problem p = random_problem(13, 1, 2, 2, 3, 4, 5, 2);
    p.scale = scale;
    expect_matches_naive(p);
  }
  Problem a = exercise1(), b = exercise1();
  b.scale = 2 * a.scale;
  EXPECT_NE(oracle(a).weights[0], oracle(b).weights[0]);
}

TEST(Oracle, StridedInputsGiveTheContiguousResult) {
  const Problem c = random_problem(14, 2, 4, 2, 3, 5, 3, 2);
  // q as [b][t][h][d] (BSHD), k with padded rows, v with padded heads.
  Problem s = c;
  s.q.strides = {3 * 4 * 3, 3, 4 * 3, 1};
  s.q.data.assign(static_cast<size_t>(2 * 3 * 4 * 3), 0.0);
  s.k.strides = {2 * 5 * 7, 5 * 7, 7, 1};
  s.k.data.assign(static_cast<size_t>(2 * 2 * 5 * 7), 99.0);
  s.v.strides = {3 * 5 * 2, 5 * 2, 2, 1};
  s.v.data.assign(static_cast<size_t>(2 * 3 * 5 * 2), -99.0);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t t = 0; t < 3; ++t) s.q.at(b, h, i, t) = c.q.at(b, h, i, t);
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t j = 0; j < 5; ++j) {
        for (int64_t t = 0; t < 3; ++t) s.k.at(b, g, j, t) = c.k.at(b, g, j, t);
        for (int64_t d = 0; d < 2; ++d) s.v.at(b, g, j, d) = c.v.at(b, g, j, d);
      }
  }
  s.validate();
  const OracleResult rc = oracle(c), rs = oracle(s);
  EXPECT_EQ(rs.out, rc.out);
  EXPECT_EQ(rs.weights, rc.weights);
  EXPECT_EQ(rs.lse, rc.lse);
  EXPECT_EQ(rs.scores, rc.scores);
  EXPECT_EQ(rs.abs_dot, rc.abs_dot);
}

TEST(Oracle, EmptyRowsAreFlaggedWithExactZeros) {
  Problem p = random_problem(15, 2, 2, 1, 3, 4, 2, 3);
  p.key_valid = {1, 1, 0, 1, 0, 0, 0, 0};  // batch 1 has no valid key
  p.causal = true;  // and rows 0 of batch 0 see only key 0
  const OracleResult r = oracle(p);
  std::vector<std::array<int64_t, 3>> want;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i) want.push_back({1, h, i});
  EXPECT_EQ(r.empty_rows, want);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 3; ++i) {
      const size_t row = row_index(p, 1, h, i);
      EXPECT_EQ(r.lse[row], -kInf);
      EXPECT_EQ(r.row_max[row], -kInf);
      EXPECT_EQ(r.row_sum[row], 0.0);
      EXPECT_EQ(r.row_allowed[row], 0);
      EXPECT_EQ(r.row_empty[row], 1);
      for (int64_t d = 0; d < 3; ++d) {
        const double o = r.out[out_index(p, 1, h, i, d)];
        EXPECT_EQ(o, 0.0);
        EXPECT_FALSE(std::signbit(o));
      }
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(r.weights[weight_index(p, 1, h, i, j)], 0.0);
      EXPECT_EQ(r.row_empty[row_index(p, 0, h, i)], 0);
    }
  }
  expect_matches_naive(p);
}

TEST(Oracle, HugeScoresGiveFiniteCorrectWeights) {
  // Scores 1e5 and 1e5 - 1: exp overflows in double without the max shift.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 2, 1);
  p.scale = 1.0;
  p.q.data = {1e5, 1};
  p.k.data = {1, 0, 1, -1};
  p.v.data = {1, 0};
  const OracleResult r = oracle(p);
  const double big = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(r.weights[0], big, 4 * std::numeric_limits<double>::epsilon());
  EXPECT_NEAR(r.weights[1], 1 - big,
              4 * std::numeric_limits<double>::epsilon());
  EXPECT_EQ(r.out[0], r.weights[0]);
  EXPECT_EQ(r.row_max[0], 1e5);
  EXPECT_NEAR(r.lse[0], 1e5 + std::log1p(std::exp(-1.0)), 1e-10);
  EXPECT_TRUE(std::isfinite(r.lse[0]));
}

TEST(Oracle, WeightsSumToOneWithinFourUlps) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Problem p = random_problem(100 + seed, 1, 2, 1, 6, 9, 4, 2);
    for (double& x : p.q.data) x *= static_cast<double>(seed + 1);
    const OracleResult r = oracle(p);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 6; ++i) {
        long double sum = 0;
        for (int64_t j = 0; j < 9; ++j)
          sum += r.weights[weight_index(p, 0, h, i, j)];
        EXPECT_NEAR(static_cast<double>(sum), 1.0,
                    4 * std::numeric_limits<double>::epsilon());
      }
    }
  }
}

TEST(Oracle, AbsDotIsTheScaledSumOfAbsoluteProducts) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 1, 3, 1);
  p.scale = -0.5;
  p.q.data = {1, -2, 3};
  p.k.data = {-4, 5, 6};
  const OracleResult r = oracle(p);
  EXPECT_EQ(r.abs_dot[0], 0.5 * (4 + 10 + 18));
  EXPECT_EQ(r.scores[0], -0.5 * (-4 - 10 + 18));
}

}  // namespace
}  // namespace attncheck
