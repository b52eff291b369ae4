// The tolerances' terms for the serving-kernel parts (SPEC 4): sinks, descales, varlen
// problems and dsink, on a correct f32 loop (within) and broken ones
// (outside).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "judge/compare.h"
#include "attncheck/oracle.h"
#include "judge/tolerance.h"

namespace attncheck {
namespace {

PrecisionTraits f32_traits() {
  PrecisionTraits t;
  t.accum = t.p_cast = DType::f32;
  t.exp_ulps = 1;  // glibc's expf and logf are within one ulp
  return t;
}

enum class Bug {
  none,
  sink_not_in_denominator,  // l = sum_j e_j, the sink forgotten
  sink_in_numerator,        // the sink's e_s added to every key's numerator
  v_descale_forgotten,      // o = sum a_j v_j of the stored v
  dsink_sign,               // dsink = +a_sink delta
};

struct F32 {
  std::vector<double> out, weights, lse, dq, dk, dv, dsink;
};

// The loop an f32 kernel runs on a dense problem (every key allowed unless
// key_valid says otherwise): descales folded into the scaled logit, a
// sink as one more term of l, the backward of SPEC 1 with dsink.
F32 f32_attention(const Problem& p, Bug bug, std::optional<DType> p_cast = std::nullopt) {
  const auto f = [](double x) { return static_cast<float>(x); };
  const float qd = f(p.descale ? p.descale->q : 1), kd = f(p.descale ? p.descale->k : 1),
              vd = f(p.descale ? p.descale->v : 1);
  const float eff = f(p.scale) * qd * kd;
  const bool sink = !p.sink.empty(), grads = !p.dout.empty();
  F32 r;
  r.out.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
  r.weights.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.tk), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads * p.tq), -INFINITY);
  std::vector<float> dk(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dk), 0);
  std::vector<float> dv(static_cast<size_t>(p.batch * p.kv_heads * p.tk * p.dv), 0);
  std::vector<float> dsink(static_cast<size_t>(p.heads), 0);
  if (grads) r.dq.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dk), 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const float z = sink ? f(p.sink[static_cast<size_t>(h)]) : 0;
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        std::vector<float> s(static_cast<size_t>(p.tk)), a(static_cast<size_t>(p.tk), 0);
        float m = sink ? z : -INFINITY;
        int64_t n = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!p.allowed(b, h, i, j)) continue;
          float dot = 0;
          for (int64_t c = 0; c < p.dk; ++c) dot += f(p.q.at(b, h, i, c)) * f(p.k.at(b, g, j, c));
          s[static_cast<size_t>(j)] = eff * dot;
          m = std::max(m, s[static_cast<size_t>(j)]);
          ++n;
        }
        if (n == 0 && !sink) continue;
        const float es = sink ? std::exp(z - m) : 0;
        float l = bug == Bug::sink_not_in_denominator ? 0 : es;
        for (int64_t j = 0; j < p.tk; ++j)
          if (p.allowed(b, h, i, j)) l += (a[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m));
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!p.allowed(b, h, i, j)) continue;
          float& x = a[static_cast<size_t>(j)];
          if (bug == Bug::sink_in_numerator) x += es;
          x /= l;
          r.weights[weight_index(p, b, h, i, j)] = x;
        }
        r.lse[row] = m + std::log(l);
        for (int64_t c = 0; c < p.dv; ++c) {
          float o = 0;
          for (int64_t j = 0; j < p.tk; ++j)
            if (p.allowed(b, h, i, j)) {
              // P rounded to p_cast before P.V, when declared so.
              const float pj = p_cast ? f(round_to(*p_cast, a[static_cast<size_t>(j)]))
                                      : a[static_cast<size_t>(j)];
              o += pj * f(p.v.at(b, g, j, c));
            }
          r.out[out_index(p, b, h, i, c)] = bug == Bug::v_descale_forgotten ? o : o * vd;
        }
        if (!grads) continue;
        std::vector<float> da(static_cast<size_t>(p.tk), 0);
        float delta = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!p.allowed(b, h, i, j)) continue;
          float x = 0;
          for (int64_t c = 0; c < p.dv; ++c)
            x += f(p.dout[out_index(p, b, h, i, c)]) * f(p.v.at(b, g, j, c));
          da[static_cast<size_t>(j)] = x * vd;
          delta += a[static_cast<size_t>(j)] * da[static_cast<size_t>(j)];
        }
        const float a_sink = es / l;
        dsink[static_cast<size_t>(h)] += bug == Bug::dsink_sign ? a_sink * delta : -a_sink * delta;
        std::vector<float> dq(static_cast<size_t>(p.dk), 0);
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!p.allowed(b, h, i, j)) continue;
          const float ds = a[static_cast<size_t>(j)] * (da[static_cast<size_t>(j)] - delta);
          const size_t kv = static_cast<size_t>((b * p.kv_heads + g) * p.tk + j);
          for (int64_t c = 0; c < p.dk; ++c) {
            dq[static_cast<size_t>(c)] += ds * f(p.k.at(b, g, j, c));
            dk[kv * static_cast<size_t>(p.dk) + static_cast<size_t>(c)] +=
                f(p.scale) * qd * ds * f(p.q.at(b, h, i, c));
          }
          for (int64_t c = 0; c < p.dv; ++c)
            dv[kv * static_cast<size_t>(p.dv) + static_cast<size_t>(c)] +=
                a[static_cast<size_t>(j)] * f(p.dout[out_index(p, b, h, i, c)]);
        }
        for (int64_t c = 0; c < p.dk; ++c)
          r.dq[row * static_cast<size_t>(p.dk) + static_cast<size_t>(c)] =
              f(p.scale) * kd * dq[static_cast<size_t>(c)];
      }
    }
  }
  for (float x : dk) r.dk.push_back(x);
  for (float x : dv) r.dv.push_back(x);
  for (float x : dsink) r.dsink.push_back(x);
  return r;
}


// Values exactly representable in E4M3 (and in f32): at most four
// significant bits.
double fp8_value(std::mt19937& rng) {
  static const double kValues[] = {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 0.375, 0.625};
  const double x = kValues[rng() % 11];
  return rng() % 2 ? -x : x;
}

void fill(std::mt19937& rng, std::vector<double>& v) {
  for (double& x : v) x = fp8_value(rng);
}

// A dense f32 problem with a sink; with `fp8`, E4M3 inputs and descales
// (0.1 and 0.7 are not f32 numbers: the kernel rounds them).
Problem dense_problem(uint32_t seed, bool fp8, bool grads) {
  std::mt19937 rng(seed);
  Problem p = Problem::zeros(DType::f32, 2, 2, 1, 3, 5, 4, 3);
  fill(rng, p.q.data);
  fill(rng, p.k.data);
  fill(rng, p.v.data);
  p.sink = {0.5, -1};
  if (fp8) {
    p.q_dtype = p.kv_dtype = DType::e4m3;
    p.descale = Descales{0.1, 3, 0.7};
  }
  if (grads) {
    p.dout.resize(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv));
    fill(rng, p.dout);
  }
  p.validate();
  return p;
}

Comparison compare_forward(const F32& got, const OracleResult& o, const Tolerances& t) {
  Comparison c;
  c.add("out", {static_cast<int64_t>(o.out.size())}, got.out, o.out, t.out);
  if (!o.weights.empty())
    c.add("weights", {static_cast<int64_t>(o.weights.size())}, got.weights, o.weights, t.weights);
  c.add("lse", {static_cast<int64_t>(o.lse.size())}, got.lse, o.lse, t.lse);
  return c;
}

Comparison compare_backward(const F32& got, const OracleResult& o, const GradTolerances& t) {
  Comparison c;
  c.add("dq", {static_cast<int64_t>(o.dq.size())}, got.dq, o.dq, t.dq);
  c.add("dk", {static_cast<int64_t>(o.dk.size())}, got.dk, o.dk, t.dk);
  c.add("dv", {static_cast<int64_t>(o.dv.size())}, got.dv, o.dv, t.dv);
  c.add("dsink", {static_cast<int64_t>(o.dsink.size())}, got.dsink, o.dsink, t.dsink);
  return c;
}

TEST(ToleranceServing, CorrectF32WithSinksAndDescalesPasses) {
  for (const bool fp8 : {false, true}) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      Problem p = dense_problem(seed, fp8, true);
      if (seed == 3) {
        // Batch entry 0 without keys: sink-only rows (o = 0, lse = sink).
        p.key_valid.assign(static_cast<size_t>(p.batch * p.tk), 1);
        for (int64_t j = 0; j < p.tk; ++j) p.key_valid[static_cast<size_t>(j)] = 0;
      }
      const OracleResult o = oracle(p);
      const Tolerances t = tolerances(p, o, f32_traits());
      ASSERT_EQ(t.ill_conditioned_rows, 0);
      const F32 got = f32_attention(p, Bug::none);
      const Comparison c = compare_forward(got, o, t);
      EXPECT_TRUE(c.ok()) << "fp8 " << fp8 << " seed " << seed << "\n" << c.describe_failures();
      EXPECT_GT(c.max_budget_used, 0);
      const GradTolerances g = grad_tolerances(p, o, f32_traits());
      ASSERT_EQ(g.dsink.size(), 2U);
      const Comparison cg = compare_backward(got, o, g);
      EXPECT_TRUE(cg.ok()) << "fp8 " << fp8 << " seed " << seed << "\n" << cg.describe_failures();
      // The bounds are f32-sized, not vacuous.
      for (size_t k = 0; k < o.out.size(); ++k) EXPECT_LT(t.out[k], 1e-5 * (std::fabs(o.out[k]) + 1));
      for (size_t h = 0; h < 2; ++h) EXPECT_LT(g.dsink[h], 1e-4 * (std::fabs(o.dsink[h]) + 1));
    }
  }
}

TEST(ToleranceServing, BrokenSinksAndDescalesFail) {
  for (const bool fp8 : {false, true}) {
    const Problem p = dense_problem(2, fp8, true);
    const OracleResult o = oracle(p);
    const Tolerances t = tolerances(p, o, f32_traits());
    for (const Bug bug : {Bug::sink_not_in_denominator, Bug::sink_in_numerator}) {
      EXPECT_FALSE(compare_forward(f32_attention(p, bug), o, t).ok())
          << "fp8 " << fp8 << " bug " << static_cast<int>(bug);
    }
    if (fp8) {
      EXPECT_FALSE(compare_forward(f32_attention(p, Bug::v_descale_forgotten), o, t).ok());
    }
    const GradTolerances g = grad_tolerances(p, o, f32_traits());
    const F32 bad = f32_attention(p, Bug::dsink_sign);
    Comparison c;
    c.add("dsink", {2}, bad.dsink, o.dsink, g.dsink);
    EXPECT_FALSE(c.ok());
  }
}

TEST(ToleranceServing, AnE4M3PCastEntersLikeAnyFormat) {
  // P rounded to E4M3 before P.V: within the tolerance of traits that
  // declare it (u_p = 2^-4, eta_p of E4M3), far outside f32's.
  const Problem p = dense_problem(4, true, false);
  const OracleResult o = oracle(p);
  PrecisionTraits cast = f32_traits();
  cast.p_cast = DType::e4m3;
  const Tolerances t = tolerances(p, o, cast);
  ASSERT_EQ(t.ill_conditioned_rows, 0);
  const F32 got = f32_attention(p, Bug::none, DType::e4m3);
  const Comparison c = compare_forward(got, o, t);
  EXPECT_TRUE(c.ok()) << c.describe_failures();
  EXPECT_GT(c.max_budget_used, 0.01);
  EXPECT_FALSE(compare_forward(got, o, tolerances(p, o, f32_traits())).ok());
}

// A packed f32 problem with a sink: sequences (tq, tk) = (2, 3), (0, 2),
// (3, 1), (1, 0), causal bottom-right, so some rows are sink-only.
Problem packed_problem() {
  const std::vector<int64_t> cq = {0, 2, 2, 5, 6}, ck = {0, 3, 5, 6, 6};
  const int64_t heads = 2, kv_heads = 1, dk = 3, dv = 2;
  Problem p = Problem::zeros(DType::f32, 4, heads, kv_heads, 3, 3, dk, dv);
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
  p.dout.assign(static_cast<size_t>(cq.back() * heads * dv), 0.0);
  fill(rng, p.dout);
  p.validate();
  return p;
}

// The f32 loop run sequence by sequence, placed in p's packed layout.
F32 packed_f32(const Problem& p, Bug bug) {
  F32 r;
  r.out.assign(static_cast<size_t>(p.total_q() * p.heads * p.dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.total_q() * p.heads), 0.0);
  r.dq.assign(static_cast<size_t>(p.total_q() * p.heads * p.dk), 0.0);
  const int64_t total_k = p.packed->cu_seqlens_k.back();
  r.dk.assign(static_cast<size_t>(total_k * p.kv_heads * p.dk), 0.0);
  r.dv.assign(static_cast<size_t>(total_k * p.kv_heads * p.dv), 0.0);
  std::vector<float> dsink(static_cast<size_t>(p.heads), 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seq_tq(b) == 0) continue;
    const Problem s = sequence_problem(p, b);
    const F32 x = f32_attention(s, bug);
    for (int64_t h = 0; h < p.heads; ++h) {
      dsink[static_cast<size_t>(h)] += static_cast<float>(x.dsink[static_cast<size_t>(h)]);
      for (int64_t i = 0; i < s.tq; ++i) {
        r.lse[row_index(p, b, h, i)] = x.lse[row_index(s, 0, h, i)];
        for (int64_t c = 0; c < p.dv; ++c)
          r.out[out_index(p, b, h, i, c)] = x.out[out_index(s, 0, h, i, c)];
        const int64_t row = p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i;
        for (int64_t c = 0; c < p.dk; ++c)
          r.dq[static_cast<size_t>((row * p.heads + h) * p.dk + c)] =
              x.dq[row_index(s, 0, h, i) * static_cast<size_t>(p.dk) + static_cast<size_t>(c)];
      }
    }
    for (int64_t j = 0; j < p.seq_tk(b); ++j) {
      const int64_t row = p.packed->cu_seqlens_k[static_cast<size_t>(b)] + j;
      for (int64_t c = 0; c < p.dk; ++c)
        r.dk[static_cast<size_t>(row * p.dk + c)] = x.dk[static_cast<size_t>(j * p.dk + c)];
      for (int64_t c = 0; c < p.dv; ++c)
        r.dv[static_cast<size_t>(row * p.dv + c)] = x.dv[static_cast<size_t>(j * p.dv + c)];
    }
  }
  for (float x : dsink) r.dsink.push_back(x);
  return r;
}

TEST(ToleranceServing, PackedProblemsAreJudgedInTheirLayout) {
  const Problem p = packed_problem();
  const OracleResult o = oracle(p);
  const Tolerances t = tolerances(p, o, f32_traits());
  ASSERT_EQ(t.out.size(), o.out.size());
  ASSERT_EQ(t.lse.size(), o.lse.size());
  EXPECT_TRUE(t.weights.empty());
  // Each sequence's tolerances, in the packed layout.
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seq_tq(b) == 0) continue;
    const Problem s = sequence_problem(p, b);
    const Tolerances ts = tolerances(s, oracle(s), f32_traits());
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < s.tq; ++i) {
        EXPECT_EQ(t.lse[row_index(p, b, h, i)], ts.lse[row_index(s, 0, h, i)]);
        for (int64_t c = 0; c < p.dv; ++c)
          EXPECT_EQ(t.out[out_index(p, b, h, i, c)], ts.out[out_index(s, 0, h, i, c)]);
      }
  }
  const F32 good = packed_f32(p, Bug::none);
  const Comparison c = compare_forward(good, o, t);
  EXPECT_TRUE(c.ok()) << c.describe_failures();
  // compare_array knows the packed shapes and rows.
  EXPECT_EQ(array_shape(ArrayKind::out, p), (std::vector<int64_t>{6, 2, 2}));
  EXPECT_EQ(array_shape(ArrayKind::lse, p), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(array_size(ArrayKind::weights, p), 0);
  EXPECT_EQ(array_shape(ArrayKind::dk, p), (std::vector<int64_t>{6, 1, 3}));
  std::vector<double> off = good.out;
  off[out_index(p, 3, 1, 0, 1)] += 1;  // sequence 3, head 1, query 0
  Comparison all, others;
  compare_array(all, ArrayKind::out, p, o.out, off, t.out, CompareMode::tolerance);
  EXPECT_EQ(all.failed, 1);
  EXPECT_EQ(all.worst.index, (std::vector<int64_t>{5, 1, 1}));
  compare_array(others, ArrayKind::out, p, o.out, off, t.out, CompareMode::tolerance, "",
                [](int64_t b, int64_t h, int64_t) { return !(b == 3 && h == 1); });
  EXPECT_TRUE(others.ok());
  EXPECT_EQ(others.checked, static_cast<int64_t>(off.size()) - 2);
  EXPECT_FALSE(compare_forward(packed_f32(p, Bug::sink_not_in_denominator), o, t).ok());
  const GradTolerances g = grad_tolerances(p, o, f32_traits());
  ASSERT_EQ(g.dq.size(), o.dq.size());
  ASSERT_EQ(g.dk.size(), o.dk.size());
  const Comparison cg = compare_backward(good, o, g);
  EXPECT_TRUE(cg.ok()) << cg.describe_failures();
  Comparison bad;
  bad.add("dsink", {2}, packed_f32(p, Bug::dsink_sign).dsink, o.dsink, g.dsink);
  EXPECT_FALSE(bad.ok());
}

TEST(ToleranceServing, PagedProblemsAreJudgedLikeTheirPackedTwins) {
  // Dense queries (batch 2, tq 2); sequence keys 3 and 1, packed or in
  // pages of 2 (sequence 0 in pages 2 then 0, sequence 1 in page 3).
  Problem packed = Problem::zeros(DType::f32, 2, 2, 1, 2, 3, 2, 2);
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
  paged.paged = PagedKv{{3, 1}, {2, 0, 3, 1}, 2, 2, 4};
  paged.k = make_tensor(4, 1, 2, 2);
  paged.v = make_tensor(4, 1, 2, 2);
  const int64_t slots[4][2] = {{2, 0}, {2, 1}, {0, 0}, {3, 0}};  // (page, slot) of each key row
  for (int64_t row = 0; row < 4; ++row)
    for (int64_t c = 0; c < 2; ++c) {
      paged.k.at(slots[row][0], 0, slots[row][1], c) = packed.k.data[static_cast<size_t>(row * 2 + c)];
      paged.v.at(slots[row][0], 0, slots[row][1], c) = packed.v.data[static_cast<size_t>(row * 2 + c)];
    }
  paged.validate();
  const OracleResult a = oracle(packed), b = oracle(paged);
  const Tolerances ta = tolerances(packed, a, f32_traits()), tb = tolerances(paged, b, f32_traits());
  EXPECT_EQ(ta.out, tb.out);
  EXPECT_EQ(ta.lse, tb.lse);
  ASSERT_EQ(tb.weights.size(), static_cast<size_t>(2 * 2 * 2 * 3));
  EXPECT_EQ(ta.weights, tb.weights);
  // Past a sequence's keys the weight is exactly 0: tolerance 0.
  EXPECT_EQ(tb.weights[weight_index(paged, 1, 0, 0, 1)], 0.0);
  EXPECT_GT(tb.weights[weight_index(paged, 1, 0, 0, 0)], 0.0);
  // A correct f32 run of each sequence, in the dense-query layout, passes.
  F32 got;
  got.out.assign(b.out.size(), 0.0);
  got.weights.assign(b.weights.size(), 0.0);
  got.lse.assign(b.lse.size(), 0.0);
  for (int64_t s = 0; s < 2; ++s) {
    const Problem sp = sequence_problem(paged, s);
    const F32 x = f32_attention(sp, Bug::none);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 2; ++i) {
        got.lse[row_index(paged, s, h, i)] = x.lse[row_index(sp, 0, h, i)];
        for (int64_t c = 0; c < 2; ++c) got.out[out_index(paged, s, h, i, c)] = x.out[out_index(sp, 0, h, i, c)];
        for (int64_t j = 0; j < paged.seq_tk(s); ++j)
          got.weights[weight_index(paged, s, h, i, j)] = x.weights[weight_index(sp, 0, h, i, j)];
      }
  }
  const Comparison c = compare_forward(got, b, tb);
  EXPECT_TRUE(c.ok()) << c.describe_failures();
  EXPECT_GT(c.max_budget_used, 0);
}

// ---- logical values, E4M3 as p_cast and s_cast ----

// p with tensor `which` ('q', 'k' or 'v') stored halved and its descale
// doubled: the same logical problem (the values are dyadic, so halving is
// exact).
Problem halved(Problem p, char which) {
  Descales d = p.descale.value_or(Descales{});
  Tensor& t = which == 'q' ? p.q : which == 'k' ? p.k : p.v;
  for (double& x : t.data) x /= 2;
  (which == 'q' ? d.q : which == 'k' ? d.k : d.v) *= 2;
  p.descale = d;
  p.validate();
  return p;
}

TEST(ToleranceServing, ADescaleAddsOnlyItsOwnTermsToTheLogicalProblemsBound) {
  // Every term is of the logical values: a problem stored with descale 2
  // has the tolerance of the same logical problem stored without descales,
  // plus what tolerance.cpp documents for the descales (powers of two, so
  // no rounding of the descale itself): 3 u_a |t_j| in every D_j, 2 u_a |c|
  // and 2 eta_a in out, and n eta_a (vd - 1) for underflowing products of
  // the stored v. A bound built from the stored v would shrink with it:
  // with v halved, A, the spread and sum |v_j| shrank. The logit terms are
  // charged as a_j (e^{D_j} - 1) (tolerance.cpp): growing D_j by dD adds
  // a_j e^{D_j} (e^{dD} - 1) <= a_j dD e^{D_j + dD}, and every D_j of these
  // f32 problems is below 1e-4, so kExp = 1.0002 >= e^{1e-4 + 1e-4} covers
  // the factor.
  constexpr double kExp = 1.0002;
  const PrecisionTraits tr = f32_traits();
  const double u = unit_roundoff(DType::f32), eta = underflow_unit(DType::f32, false);
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const Problem p0 = dense_problem(seed, false, false);
    const OracleResult o = oracle(p0);
    const Tolerances t0 = tolerances(p0, o, tr);
    for (const char which : {'q', 'k', 'v'}) {
      const Problem p1 = halved(p0, which);
      const OracleResult o1 = oracle(p1);
      ASSERT_EQ(o1.out, o.out) << which;  // the oracle sees the logical problem
      const Tolerances t1 = tolerances(p1, o1, tr);
      ASSERT_EQ(t1.ill_conditioned_rows, 0);
      const double vd = which == 'v' ? 2 : 1;
      for (int64_t b = 0; b < p0.batch; ++b)
        for (int64_t h = 0; h < p0.heads; ++h)
          for (int64_t i = 0; i < p0.tq; ++i) {
            const size_t row = row_index(p0, b, h, i);
            const double n = static_cast<double>(o.row_allowed[row]);
            double sum_at = 0;  // sum_j a_j |t_j|
            for (int64_t j = 0; j < p0.tk; ++j) {
              const size_t w = weight_index(p0, b, h, i, j);
              sum_at += o.weights[w] * std::fabs(o.scores[w]);
            }
            for (int64_t j = 0; j < p0.tk; ++j) {
              const size_t w = weight_index(p0, b, h, i, j);
              const double extra = kSecondOrderFactor * o.weights[w] * 3 * u *
                                   (std::fabs(o.scores[w]) + sum_at);
              EXPECT_GE(t1.weights[w], t0.weights[w]) << which << " weight " << w;
              EXPECT_LE(t1.weights[w] - t0.weights[w], extra * kExp) << which << " " << w;
            }
            EXPECT_GE(t1.lse[row], t0.lse[row]);
            EXPECT_LE(t1.lse[row] - t0.lse[row], kSecondOrderFactor * 3 * u * sum_at * kExp);
            for (int64_t c = 0; c < p0.dv; ++c) {
              const size_t at = out_index(p0, b, h, i, c);
              const double oc = o.out[at];
              double spread = 0;  // sum_j a_j 3 u |t_j| |v_j - c|, v logical
              for (int64_t j = 0; j < p0.tk; ++j) {
                const size_t w = weight_index(p0, b, h, i, j);
                spread += o.weights[w] * 3 * u * std::fabs(o.scores[w]) *
                          std::fabs(p0.v.at(b, p0.kv_head(h), j, c) - oc);
              }
              const double extra = kSecondOrderFactor *
                                   (spread + 2 * u * std::fabs(oc) + 2 * eta + n * eta * (vd - 1));
              EXPECT_GE(t1.out[at], t0.out[at]) << which << " out " << at;
              EXPECT_LE(t1.out[at] - t0.out[at], extra * kExp + 1e-15 * t0.out[at])
                  << which << " out " << at;
            }
          }
    }
  }
}

TEST(ToleranceServing, GradientBoundsOfADescaledProblemCoverTheLogicalOnes) {
  // The gradients' bounds were of the logical values already; a descale
  // only adds roundings: at least the undescaled bound, and at most twice
  // it (one more rounding in dA's sum of dv >= 3 products, two to four in
  // sums of n + 2 or more terms).
  const PrecisionTraits tr = f32_traits();
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const Problem p0 = dense_problem(seed, false, true);
    const OracleResult o = oracle(p0);
    const GradTolerances g0 = grad_tolerances(p0, o, tr);
    for (const char which : {'q', 'k', 'v'}) {
      const Problem p1 = halved(p0, which);
      const OracleResult o1 = oracle(p1);
      const GradTolerances g1 = grad_tolerances(p1, o1, tr);
      ASSERT_EQ(g1.ill_conditioned_rows, 0);
      const auto check = [&](const std::vector<double>& a, const std::vector<double>& b,
                             const char* what) {
        ASSERT_EQ(a.size(), b.size());
        for (size_t k = 0; k < a.size(); ++k) {
          EXPECT_GE(b[k], a[k]) << which << " " << what << " " << k;
          EXPECT_LE(b[k], 2 * a[k]) << which << " " << what << " " << k;
        }
      };
      check(g0.dq, g1.dq, "dq");
      check(g0.dk, g1.dk, "dk");
      check(g0.dv, g1.dv, "dv");
      check(g0.dsink, g1.dsink, "dsink");
      // A correct f32 backward of the stored problem passes.
      const Comparison c = compare_backward(f32_attention(p1, Bug::none), o1, g1);
      EXPECT_TRUE(c.ok()) << which << "\n" << c.describe_failures();
    }
  }
}

// A case seen failing a correct kernel: five keys of equal score (weights 1/5), v = 2^-147
// stored as 2^-148 with v_descale 2: the exact output 2^-147 is an f32
// subnormal. A correct f32 loop forms a_j v_j of the stored v: 0.4 of the
// smallest subnormal, rounded to 0, five times, then times vd: out = 0,
// an error of 2^-147 (8 eta_a). The bound of the stored v gave 1.25 (5 + 1)
// eta_a = 7.5 eta_a; the products' underflow scaled by vd gives room.
Problem subnormal_output_problem(bool descaled) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 5, 1, 1);  // q = k = 0
  for (double& x : p.v.data) x = descaled ? 0x1p-148 : 0x1p-147;
  if (descaled) p.descale = Descales{1, 1, 2};
  p.validate();
  return p;
}

TEST(ToleranceServing, ASubnormalOutputStoredWithAVDescaleIsJudgedLikeItsLogicalProblem) {
  for (const bool descaled : {false, true}) {
    const Problem p = subnormal_output_problem(descaled);
    const OracleResult o = oracle(p);
    ASSERT_EQ(o.out[0], 0x1p-147);
    const Tolerances t = tolerances(p, o, f32_traits());
    const F32 got = f32_attention(p, Bug::none);
    if (descaled) {
      EXPECT_EQ(got.out[0], 0.0);  // every product rounded to 0
    }
    const Comparison c = compare_forward(got, o, t);
    EXPECT_TRUE(c.ok()) << "descaled " << descaled << "\n" << c.describe_failures();
    EXPECT_LT(c.max_budget_used, 0.6) << descaled;
  }
}

TEST(ToleranceServing, AnE4M3PCastCostsUpAndEtaPOfE4M3) {
  // Equal scores, so D_j is 0 and the difference between p_cast E4M3 and
  // no cast is exactly SPEC 4's: u_p (A + |c|) + (eta_p - eta_a) sum |v_j|,
  // eta_p half E4M3's smallest subnormal (2^-9 / 2), or twice its smallest
  // normal (2 * 2^-6) where P's format is declared to flush.
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 4, 1, 2);
  p.v.data = {1, -0.5, 0.25, 2, -1.5, 0.75, 0.125, -2};
  p.validate();
  const OracleResult o = oracle(p);
  const PrecisionTraits none = f32_traits();
  PrecisionTraits cast = none;
  cast.p_cast = DType::e4m3;
  PrecisionTraits flushing = cast;
  flushing.ftz_formats = kFtzPCast;
  const Tolerances t0 = tolerances(p, o, none), t1 = tolerances(p, o, cast),
                   t2 = tolerances(p, o, flushing);
  const double eta_a = underflow_unit(DType::f32, false);
  for (int64_t c = 0; c < 2; ++c) {
    double A = 0, sum_v = 0;
    for (int64_t j = 0; j < 4; ++j) {
      A += 0.25 * std::fabs(p.v.at(0, 0, j, c));
      sum_v += std::fabs(p.v.at(0, 0, j, c));
    }
    const double oc = std::fabs(o.out[static_cast<size_t>(c)]);
    const double base = t0.out[static_cast<size_t>(c)];
    EXPECT_NEAR(t1.out[static_cast<size_t>(c)] - base,
                kSecondOrderFactor * (0x1p-4 * (A + oc) + (0x1p-10 - eta_a) * sum_v), 1e-12);
    EXPECT_NEAR(t2.out[static_cast<size_t>(c)] - base,
                kSecondOrderFactor * (0x1p-4 * (A + oc) + (0x1p-5 - eta_a) * sum_v), 1e-12);
  }
}

TEST(ToleranceServing, ScoresStoredInE4M3BelowItsNormalRangeErrByItsEta) {
  // Two keys, logits 0.9 * 2^-10 and 0: stored in E4M3 (s_cast), the first
  // is below half its smallest subnormal 2^-9 and becomes 0, an absolute
  // error of 0.9 * 2^-10 that u_s (2 |t| + |s|) = 2.7 * 2^-14 does not
  // cover. The bound now adds eta_s per rounding; the weights of scores
  // stored so (both keys then weigh 1/2) pass.
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 2, 1, 1);
  p.q.data = {1};
  p.k.data = {static_cast<double>(static_cast<float>(0.9 * 0x1p-10)), 0};
  p.v.data = {1, -1};
  p.scale = 1;
  p.validate();
  const OracleResult o = oracle(p);
  PrecisionTraits t = f32_traits();
  t.s_cast = DType::e4m3;
  const Tolerances tol = tolerances(p, o, t);
  ASSERT_EQ(tol.ill_conditioned_rows, 0);
  ASSERT_EQ(round_to(DType::e4m3, o.scores[0]), 0.0);
  F32 got;
  got.weights = {0.5, 0.5};
  got.out = {0.0};
  got.lse = {std::log(2.0)};
  const Comparison c = compare_forward(got, o, tol);
  EXPECT_TRUE(c.ok()) << c.describe_failures();
}

}  // namespace
}  // namespace attncheck
