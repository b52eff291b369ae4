// The certified oracle on serving-kernel problems (SPEC 1.1): sinks, descales,
// packed and paged sequences, and dsink, against hand-derived values and an
// independent 50-digit computation (Boost.Multiprecision, not MPFR).

#include <gtest/gtest.h>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attncheck/oracle.h"

namespace attncheck {
namespace {

using HP = boost::multiprecision::cpp_bin_float_50;  // 166 bits

// SPEC 1.1's result of `p` (any problem whose allowed() is meaningful;
// sequences of a varlen problem are passed one by one) in 166-bit
// arithmetic: products of doubles are exact there, exp / log within 10^-49.
// dsink terms are added to *dsink ([heads]) when given.
struct Ref {
  std::vector<double> out, weights, lse, dq, dk, dv;
  std::vector<HP> dsink;
};

Ref reference(const Problem& p) {
  const double qd = p.descale ? p.descale->q : 1, kd = p.descale ? p.descale->k : 1,
               vd = p.descale ? p.descale->v : 1;
  const HP scale = HP(p.scale) * HP(qd) * HP(kd);
  const bool grads = !p.dout.empty(), sink = !p.sink.empty();
  Ref r;
  r.out.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
  r.weights.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.tk), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads * p.tq), -INFINITY);
  std::vector<HP> dk(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dk), HP(0));
  std::vector<HP> dv(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dv), HP(0));
  r.dsink.assign(static_cast<size_t>(p.heads), HP(0));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        std::vector<HP> s(static_cast<size_t>(p.tk)), a(static_cast<size_t>(p.tk));
        std::vector<uint8_t> ok(static_cast<size_t>(p.tk));
        HP m = sink ? HP(p.sink[static_cast<size_t>(h)]) : HP(-1e300);
        bool any = sink;
        for (int64_t j = 0; j < p.tk; ++j) {
          ok[static_cast<size_t>(j)] = p.allowed(b, h, i, j) ? 1 : 0;
          if (!ok[static_cast<size_t>(j)]) continue;
          HP dot = 0;
          for (int64_t c = 0; c < p.dk; ++c) dot += HP(p.q.at(b, h, i, c)) * HP(p.k.at(b, g, j, c));
          s[static_cast<size_t>(j)] = scale * dot + HP(p.bias_at(b, h, i, j));
          if (!any || s[static_cast<size_t>(j)] > m) m = s[static_cast<size_t>(j)];
          any = true;
        }
        if (!any) continue;
        HP z = sink ? HP(exp(HP(p.sink[static_cast<size_t>(h)]) - m)) : HP(0);
        for (int64_t j = 0; j < p.tk; ++j)
          if (ok[static_cast<size_t>(j)]) z += exp(s[static_cast<size_t>(j)] - m);
        const size_t row = static_cast<size_t>((b * p.heads + h) * p.tq + i);
        r.lse[row] = static_cast<double>(m + log(z));
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!ok[static_cast<size_t>(j)]) continue;
          a[static_cast<size_t>(j)] = exp(s[static_cast<size_t>(j)] - m) / z;
          r.weights[row * static_cast<size_t>(p.tk) + static_cast<size_t>(j)] =
              static_cast<double>(a[static_cast<size_t>(j)]);
        }
        for (int64_t c = 0; c < p.dv; ++c) {
          HP o = 0;
          for (int64_t j = 0; j < p.tk; ++j)
            if (ok[static_cast<size_t>(j)]) o += a[static_cast<size_t>(j)] * HP(p.v.at(b, g, j, c));
          r.out[row * static_cast<size_t>(p.dv) + static_cast<size_t>(c)] = static_cast<double>(o * vd);
        }
        if (!grads) continue;
        std::vector<HP> da(static_cast<size_t>(p.tk));
        HP sigma = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!ok[static_cast<size_t>(j)]) continue;
          HP x = 0;
          for (int64_t c = 0; c < p.dv; ++c)
            x += HP(p.dout[row * static_cast<size_t>(p.dv) + static_cast<size_t>(c)]) * HP(p.v.at(b, g, j, c));
          da[static_cast<size_t>(j)] = x * vd;
          sigma += a[static_cast<size_t>(j)] * da[static_cast<size_t>(j)];
        }
        if (sink) r.dsink[static_cast<size_t>(h)] -= exp(HP(p.sink[static_cast<size_t>(h)]) - m) / z * sigma;
        for (int64_t c = 0; c < p.dk; ++c) {
          HP acc = 0;
          for (int64_t j = 0; j < p.tk; ++j) {
            if (!ok[static_cast<size_t>(j)]) continue;
            const HP ds = a[static_cast<size_t>(j)] * (da[static_cast<size_t>(j)] - sigma);
            acc += ds * HP(p.k.at(b, g, j, c));
            dk[static_cast<size_t>(((b * p.kv_heads + g) * p.tk + j) * p.dk + c)] +=
                HP(p.scale) * HP(qd) * ds * HP(p.q.at(b, h, i, c));
          }
          r.dq.resize(static_cast<size_t>(p.batch * p.heads * p.tq * p.dk));
          r.dq[row * static_cast<size_t>(p.dk) + static_cast<size_t>(c)] =
              static_cast<double>(HP(p.scale) * HP(kd) * acc);
        }
        for (int64_t j = 0; j < p.tk; ++j)
          if (ok[static_cast<size_t>(j)])
            for (int64_t c = 0; c < p.dv; ++c)
              dv[static_cast<size_t>(((b * p.kv_heads + g) * p.tk + j) * p.dv + c)] +=
                  a[static_cast<size_t>(j)] * HP(p.dout[row * static_cast<size_t>(p.dv) + static_cast<size_t>(c)]);
      }
    }
  }
  if (grads) {
    r.dq.resize(static_cast<size_t>(p.batch * p.heads * p.tq * p.dk), 0.0);
    for (const HP& x : dk) r.dk.push_back(static_cast<double>(x));
    for (const HP& x : dv) r.dv.push_back(static_cast<double>(x));
  }
  return r;
}

// Values on a grid of 1/16 in [-2, 2], exactly representable everywhere.
double grid(std::mt19937& rng) { return static_cast<double>(static_cast<int>(rng() % 65) - 32) / 16; }

void fill(std::mt19937& rng, std::vector<double>& v) {
  for (double& x : v) x = grid(rng);
}

Problem random_problem(uint32_t seed, bool grads) {
  std::mt19937 rng(seed);
  Problem p = Problem::zeros(DType::f64, 2, 2, 1, 3, 4, 3, 2);
  fill(rng, p.q.data);
  fill(rng, p.k.data);
  fill(rng, p.v.data);
  if (grads) {
    p.dout.resize(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv));
    fill(rng, p.dout);
  }
  return p;
}

void expect_certified(const OracleResult& r) {
  EXPECT_TRUE(r.uncertified.empty()) << r.uncertified.size() << " uncertified, first "
                                     << r.uncertified.front().array;
}

// Every array of o equals the reference. The reference's own error is
// about 2^-160 relative to the magnitudes a value cancels from (the
// gradients' dA_j - delta, where one weight is within e^-100 of 1, cancel
// far more: a 1000-digit reference was needed there in an ad-hoc stress
// run); the problems here have moderate scores, so their values sit nowhere
// near that and the rounded reference is the correctly rounded value.
void expect_matches(const OracleResult& o, const Ref& r) {
  EXPECT_EQ(o.out, r.out);
  EXPECT_EQ(o.weights, r.weights);
  EXPECT_EQ(o.lse, r.lse);
  EXPECT_EQ(o.dq, r.dq);
  EXPECT_EQ(o.dk, r.dk);
  EXPECT_EQ(o.dv, r.dv);
}

TEST(OracleServing, OneKeyAndASinkByHand) {
  // One key with score s = 0.5 and a sink z = -0.25: a = e^s / (e^s + e^z),
  // lse = log(e^s + e^z), o = 3 a.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 1, 1, 1);
  p.scale = 1;
  p.q.at(0, 0, 0, 0) = 1;
  p.k.at(0, 0, 0, 0) = 0.5;
  p.v.at(0, 0, 0, 0) = 3;
  p.sink = {-0.25};
  const OracleResult r = oracle(p);
  expect_certified(r);
  const HP es = exp(HP(0.5)), ez = exp(HP(-0.25));
  EXPECT_EQ(r.weights[0], static_cast<double>(es / (es + ez)));
  EXPECT_EQ(r.lse[0], static_cast<double>(log(es + ez)));
  EXPECT_EQ(r.out[0], static_cast<double>(3 * es / (es + ez)));
  EXPECT_EQ(r.row_max[0], 0.5);  // m counts the sink
  // Without the sink the weight is 1: the sink is what changed it.
  p.sink.clear();
  EXPECT_EQ(oracle(p).weights[0], 1.0);
  // A sink equal to the score halves the weight exactly.
  p.sink = {0.5};
  const OracleResult half = oracle(p);
  expect_certified(half);
  EXPECT_EQ(half.weights[0], 0.5);
  EXPECT_EQ(half.out[0], 1.5);
  EXPECT_EQ(half.lse[0], static_cast<double>(HP(0.5) + log(HP(2))));
}

TEST(OracleServing, SinkOnlyRowsAreNotEmpty) {
  Problem p = random_problem(7, true);
  p.sink = {0.375, -2.5};
  p.key_valid.assign(static_cast<size_t>(p.batch * p.tk), 1);
  for (int64_t j = 0; j < p.tk; ++j) p.key_valid[static_cast<size_t>(j)] = 0;  // batch 0: no key
  const OracleResult r = oracle(p);
  expect_certified(r);
  EXPECT_TRUE(r.empty_rows.empty());
  for (int64_t h = 0; h < p.heads; ++h) {
    for (int64_t i = 0; i < p.tq; ++i) {
      const size_t row = row_index(p, 0, h, i);
      EXPECT_EQ(r.lse[row], p.sink[static_cast<size_t>(h)]);
      EXPECT_EQ(r.row_empty[row], 0);
      EXPECT_EQ(r.row_allowed[row], 0);
      for (int64_t c = 0; c < p.dv; ++c) EXPECT_EQ(r.out[out_index(p, 0, h, i, c)], 0.0);
      for (int64_t c = 0; c < p.dk; ++c) EXPECT_EQ(r.dq[row * static_cast<size_t>(p.dk) + static_cast<size_t>(c)], 0.0);
    }
  }
  const Ref ref = reference(p);
  expect_matches(r, ref);
  ASSERT_EQ(r.dsink.size(), 2U);
  for (size_t h = 0; h < 2; ++h) EXPECT_EQ(r.dsink[h], static_cast<double>(ref.dsink[h]));
  // The same rows without a sink are empty.
  p.sink.clear();
  const OracleResult e = oracle(p);
  EXPECT_EQ(e.empty_rows.size(), static_cast<size_t>(p.heads * p.tq));
  EXPECT_TRUE(e.dsink.empty());
}

TEST(OracleServing, ASinkIsAKeyOfValueZeroWithTheSinkAsBias) {
  Problem p = random_problem(11, true);
  p.sink = {0.625, -0.75};
  // The same problem in version 1: one more key with k = v = 0 (so its
  // scale * q . k is exactly 0) and bias sink_h, the real keys bias 0.
  Problem w = Problem::zeros(DType::f64, p.batch, p.heads, p.kv_heads, p.tq, p.tk + 1, p.dk, p.dv);
  w.scale = p.scale;
  w.dout = p.dout;
  Broadcast<double> bias;
  bias.batch = 1;
  bias.heads = p.heads;
  bias.data.assign(static_cast<size_t>(p.heads * p.tq * (p.tk + 1)), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t c = 0; c < p.dk; ++c) w.k.at(b, g, j, c) = p.k.at(b, g, j, c);
        for (int64_t c = 0; c < p.dv; ++c) w.v.at(b, g, j, c) = p.v.at(b, g, j, c);
      }
  w.q = p.q;
  for (int64_t h = 0; h < p.heads; ++h)
    for (int64_t i = 0; i < p.tq; ++i) bias.at(0, h, i, p.tk, p.tq, p.tk + 1) = p.sink[static_cast<size_t>(h)];
  w.bias = bias;
  const OracleResult r = oracle(p), x = oracle(w);
  expect_certified(r);
  expect_certified(x);
  EXPECT_EQ(r.out, x.out);
  EXPECT_EQ(r.lse, x.lse);
  EXPECT_EQ(r.dq, x.dq);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j)
          EXPECT_EQ(r.weights[weight_index(p, b, h, i, j)], x.weights[weight_index(w, b, h, i, j)]);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < p.tk; ++j) {
      for (int64_t c = 0; c < p.dk; ++c)
        EXPECT_EQ(r.dk[static_cast<size_t>((b * p.tk + j) * p.dk + c)],
                  x.dk[static_cast<size_t>((b * w.tk + j) * p.dk + c)]);
      for (int64_t c = 0; c < p.dv; ++c)
        EXPECT_EQ(r.dv[static_cast<size_t>((b * p.tk + j) * p.dv + c)],
                  x.dv[static_cast<size_t>((b * w.tk + j) * p.dv + c)]);
    }
}

TEST(OracleServing, SinksDescalesAndGradientsMatchAnIndependentComputation) {
  Problem p = random_problem(5, true);
  p.sink = {0.75, -1.5};
  p.descale = Descales{0.1, 3, 0.7};  // products with stored values are not doubles
  const OracleResult r = oracle(p);
  expect_certified(r);
  const Ref ref = reference(p);
  expect_matches(r, ref);
  ASSERT_EQ(r.dsink.size(), 2U);
  for (size_t h = 0; h < 2; ++h) EXPECT_EQ(r.dsink[h], static_cast<double>(ref.dsink[h]));

  // Rounding the logical values to doubles first is a different problem,
  // and the oracle answers the exact one.
  Problem rounded = p;
  rounded.descale.reset();
  for (double& x : rounded.q.data) x *= 0.1;
  for (double& x : rounded.k.data) x *= 3;
  for (double& x : rounded.v.data) x *= 0.7;
  const OracleResult pre = oracle(rounded);
  EXPECT_NE(pre.out, r.out);
}

TEST(OracleServing, PowerOfTwoDescalesEqualScaledInputs) {
  Problem p = random_problem(9, true);
  p.sink = {0.5, 1.25};
  p.descale = Descales{2, 0.25, 8};
  Problem scaled = p;
  scaled.descale.reset();
  for (double& x : scaled.q.data) x *= 2;
  for (double& x : scaled.k.data) x *= 0.25;
  for (double& x : scaled.v.data) x *= 8;
  const OracleResult r = oracle(p), s = oracle(scaled);
  expect_certified(r);
  EXPECT_EQ(r.out, s.out);
  EXPECT_EQ(r.weights, s.weights);
  EXPECT_EQ(r.lse, s.lse);
  // Gradients are of the logical inputs: the scaled problem's, exactly.
  EXPECT_EQ(r.dq, s.dq);
  EXPECT_EQ(r.dk, s.dk);
  EXPECT_EQ(r.dv, s.dv);
  EXPECT_EQ(r.dsink, s.dsink);
  EXPECT_EQ(r.abs_dot, s.abs_dot);
}

TEST(OracleServing, FastAndExactPathsAgreeWithTheReferenceOnRandomProblems) {
  // Normal f32 values: the double-double fast path decides most forward
  // values of these, the MPFR path the gradients and the rest.
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    Problem p = Problem::zeros(DType::f32, 1, 2, 2, 12, 12, 8, 4);
    for (auto* t : {&p.q.data, &p.k.data, &p.v.data}) for (double& x : *t) x = normal(rng);
    p.dout.resize(static_cast<size_t>(p.heads * p.tq * p.dv));
    for (double& x : p.dout) x = normal(rng);
    p.sink = {static_cast<float>(normal(rng)), 2.5};
    if (seed != 2) p.descale = Descales{0.1, 3, 0.7};
    p.causal = seed == 3;
    const OracleResult r = oracle(p);
    expect_certified(r);
    const Ref ref = reference(p);
    expect_matches(r, ref);
    for (size_t h = 0; h < 2; ++h) EXPECT_EQ(r.dsink[h], static_cast<double>(ref.dsink[h]));
  }
}

// A packed problem: sequences with (tq, tk) = (2, 3), (0, 2), (3, 1), (1, 0).
Problem packed_problem(bool grads) {
  const std::vector<int64_t> cq = {0, 2, 2, 5, 6}, ck = {0, 3, 5, 6, 6};
  const int64_t heads = 2, kv_heads = 1, dk = 3, dv = 2;
  Problem p = Problem::zeros(DType::f64, 4, heads, kv_heads, 3, 3, dk, dv);
  p.packed = PackedSeqs{cq, ck};
  std::mt19937 rng(3);
  p.q.data.assign(static_cast<size_t>(cq.back() * heads * dk), 0.0);
  p.q.strides = {0, dk, heads * dk, 1};
  p.k.data.assign(static_cast<size_t>(ck.back() * kv_heads * dk), 0.0);
  p.k.strides = {0, dk, kv_heads * dk, 1};
  p.v.data.assign(static_cast<size_t>(ck.back() * kv_heads * dv), 0.0);
  p.v.strides = {0, dv, kv_heads * dv, 1};
  fill(rng, p.q.data);
  fill(rng, p.k.data);
  fill(rng, p.v.data);
  p.sink = {0.25, -0.5};
  p.causal = true;
  p.align = Align::bottom_right;
  if (grads) {
    p.dout.assign(static_cast<size_t>(cq.back() * heads * dv), 0.0);
    fill(rng, p.dout);
  }
  p.validate();
  return p;
}

TEST(OracleServing, PackedProblemsAreTheirSequencesInThePackedLayout) {
  const Problem p = packed_problem(true);
  const OracleResult r = oracle(p);
  expect_certified(r);
  ASSERT_EQ(r.out.size(), static_cast<size_t>(6 * 2 * 2));
  ASSERT_EQ(r.lse.size(), static_cast<size_t>(2 * 6));
  EXPECT_TRUE(r.weights.empty());
  ASSERT_EQ(r.dq.size(), static_cast<size_t>(6 * 2 * 3));
  ASSERT_EQ(r.dk.size(), static_cast<size_t>(6 * 1 * 3));
  ASSERT_EQ(r.sequences.size(), 4U);
  EXPECT_TRUE(r.sequences[1].out.empty());  // no queries
  std::vector<HP> dsink(2, HP(0));
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seq_tq(b) == 0) continue;
    const Problem s = sequence_problem(p, b);
    const OracleResult o = oracle(s);
    const Ref ref = reference(s);
    expect_matches(o, ref);
    for (size_t h = 0; h < 2; ++h) dsink[h] += ref.dsink[h];
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < s.tq; ++i) {
        EXPECT_EQ(r.lse[row_index(p, b, h, i)], o.lse[row_index(s, 0, h, i)]);
        for (int64_t c = 0; c < p.dv; ++c)
          EXPECT_EQ(r.out[out_index(p, b, h, i, c)], o.out[out_index(s, 0, h, i, c)]);
        for (int64_t c = 0; c < p.dk; ++c)
          EXPECT_EQ(r.dq[static_cast<size_t>(((p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i) * p.heads + h) * p.dk + c)],
                    o.dq[row_index(s, 0, h, i) * static_cast<size_t>(p.dk) + static_cast<size_t>(c)]);
      }
    }
    for (int64_t j = 0; j < p.seq_tk(b); ++j) {
      const int64_t row = p.packed->cu_seqlens_k[static_cast<size_t>(b)] + j;
      for (int64_t c = 0; c < p.dk; ++c)
        EXPECT_EQ(r.dk[static_cast<size_t>(row * p.dk + c)], o.dk[static_cast<size_t>(j * p.dk + c)]);
      for (int64_t c = 0; c < p.dv; ++c)
        EXPECT_EQ(r.dv[static_cast<size_t>(row * p.dv + c)], o.dv[static_cast<size_t>(j * p.dv + c)]);
    }
  }
  // Sequence 3 has no key: sink-only rows, lse = sink, not empty.
  EXPECT_TRUE(r.empty_rows.empty());
  EXPECT_EQ(r.lse[row_index(p, 3, 1, 0)], -0.5);
  // dsink sums every sequence's rows, rounded once.
  ASSERT_EQ(r.dsink.size(), 2U);
  for (size_t h = 0; h < 2; ++h) EXPECT_EQ(r.dsink[h], static_cast<double>(dsink[h]));
}

TEST(OracleServing, PagedKeysEqualPackedKeys) {
  // Dense queries (batch 2, tq 2); sequence keys 3 and 1, in pages of 2.
  Problem packed = Problem::zeros(DType::f64, 2, 2, 1, 2, 3, 2, 2);
  packed.packed = PackedSeqs{{}, {0, 3, 4}};
  std::mt19937 rng(17);
  fill(rng, packed.q.data);
  packed.k.data.assign(4 * 2, 0.0);
  packed.k.strides = {0, 2, 2, 1};
  packed.v.data.assign(4 * 2, 0.0);
  packed.v.strides = {0, 2, 2, 1};
  fill(rng, packed.k.data);
  fill(rng, packed.v.data);
  packed.sink = {1.5, -0.125};
  packed.validate();

  Problem paged = packed;
  paged.packed.reset();
  // Pages: sequence 0 keys 0-1 in page 2, key 2 in page 0; sequence 1 in
  // page 3; page 1 unused (NaN: nobody may read it).
  paged.paged = PagedKv{{3, 1}, {2, 0, 3, 1}, 2, 2, 4};
  paged.k = make_tensor(4, 1, 2, 2);
  paged.v = make_tensor(4, 1, 2, 2);
  for (double& x : paged.k.data) x = NAN;
  for (double& x : paged.v.data) x = NAN;
  const auto put = [&](int64_t page, int64_t slot, int64_t row) {
    for (int64_t c = 0; c < 2; ++c) {
      paged.k.at(page, 0, slot, c) = packed.k.data[static_cast<size_t>(row * 2 + c)];
      paged.v.at(page, 0, slot, c) = packed.v.data[static_cast<size_t>(row * 2 + c)];
    }
  };
  put(2, 0, 0);
  put(2, 1, 1);
  put(0, 0, 2);
  put(3, 0, 3);
  paged.validate();
  const OracleResult a = oracle(packed), b = oracle(paged);
  expect_certified(a);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.weights, b.weights);
  ASSERT_EQ(b.weights.size(), static_cast<size_t>(2 * 2 * 2 * 3));
  // Sequence 1 has one key: weights past it are 0.
  EXPECT_EQ(b.weights[weight_index(paged, 1, 0, 0, 1)], 0.0);
  EXPECT_GT(b.weights[weight_index(paged, 1, 0, 0, 0)], 0.0);
}

}  // namespace
}  // namespace attncheck
