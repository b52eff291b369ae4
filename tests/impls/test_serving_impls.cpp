// The serving-kernel implementations (SPEC 1.1) on hand-built
// problems: the widened loop kernels and paged_online_f32 compute sinks,
// packed sequences, paged K/V and descaled fp8 inputs as SPEC 1.1 states
// (a packed batch equals its sequences, a paged cache its contiguous keys,
// bitwise; the sink's gradient matches finite differences), agree with each
// other, and each broken twin of a serving part (serving_part_twins.h)
// differs from them on a problem made for its bug while the correct kernels
// agree on it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "attncheck/registry.h"
#include "serving_part_twins.h"
#include "size_dependent_twins.h"
#include "test_support.h"

namespace attncheck {
namespace {

using test_support::impl;
using test_support::Values;

// A packed tensor [rows][heads][d] (strides {0, d, heads * d, 1}) of values
// rounded to `format`.
Tensor packed_tensor(int64_t rows, int64_t heads, int64_t d, DType format, Values& values) {
  Tensor t = make_tensor(1, rows, heads, d);
  t.strides = {0, d, heads * d, 1};
  for (double& x : t.data) x = round_to(format, values.next());
  return t;
}

// Offsets 0, n_0, n_0 + n_1, ...
std::vector<int64_t> offsets(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu{0};
  for (int64_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// A packed batch (queries and keys) of sequences with these lengths, GQA
// 4 / 2 heads, dk 3, dv 2; inputs in `q` / `kv`, output `out`.
Problem packed_problem(const std::vector<int64_t>& q_lens, const std::vector<int64_t>& k_lens,
                       DTypeCombo f, uint64_t seed) {
  const auto batch = static_cast<int64_t>(q_lens.size());
  Problem p = Problem::zeros(f.out, batch, 4, 2, *std::max_element(q_lens.begin(), q_lens.end()),
                             *std::max_element(k_lens.begin(), k_lens.end()), 3, 2);
  if (f.q != f.out) p.q_dtype = f.q;
  if (f.kv != f.out) p.kv_dtype = f.kv;
  p.packed = PackedSeqs{offsets(q_lens), offsets(k_lens)};
  Values values(seed);
  p.q = packed_tensor(p.packed->cu_seqlens_q.back(), p.heads, p.dk, f.q, values);
  p.k = packed_tensor(p.packed->cu_seqlens_k.back(), p.kv_heads, p.dk, f.kv, values);
  p.v = packed_tensor(p.packed->cu_seqlens_k.back(), p.kv_heads, p.dv, f.kv, values);
  return p;
}

// p (packed keys) with its keys moved into a paged cache of `page_size`
// slots: pages in a shuffled order, two pages no sequence uses, and every
// slot no key fills (unused pages, the last page's tail) holding `stale`.
Problem paged_from(const Problem& p, int64_t page_size, double stale) {
  Problem c = p;
  c.packed->cu_seqlens_k.clear();
  if (!c.packed_q()) c.packed.reset();
  PagedKv pg;
  pg.page_size = page_size;
  pg.block_table_stride = (p.tk + page_size - 1) / page_size + 1;  // one entry to spare
  int64_t needed = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    pg.seqlens_k.push_back(p.seq_tk(b));
    needed += (p.seq_tk(b) + page_size - 1) / page_size;
  }
  pg.num_pages = needed + 2;
  // Page k of the batch, in order, is order[k]: a fixed shuffle.
  std::vector<int64_t> order(static_cast<size_t>(pg.num_pages));
  std::iota(order.begin(), order.end(), 0);
  for (size_t k = order.size() - 1; k > 0; --k) std::swap(order[k], order[(k * 5 + 3) % (k + 1)]);
  pg.block_table.assign(static_cast<size_t>(p.batch * pg.block_table_stride), -1);
  int64_t next = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t s = 0; s * page_size < p.seq_tk(b); ++s)
      pg.block_table[static_cast<size_t>(b * pg.block_table_stride + s)] =
          order[static_cast<size_t>(next++)];
  c.k = make_tensor(pg.num_pages, p.kv_heads, page_size, p.dk);
  c.v = make_tensor(pg.num_pages, p.kv_heads, page_size, p.dv);
  std::fill(c.k.data.begin(), c.k.data.end(), stale);
  std::fill(c.v.data.begin(), c.v.data.end(), stale);
  c.tk = p.tk;
  c.paged = pg;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.seq_tk(b); ++j) {
        for (int64_t d = 0; d < p.dk; ++d)
          c.k.data[c.kv_offset(c.k, b, g, j, d)] = p.k_at(b, g, j, d);
        for (int64_t d = 0; d < p.dv; ++d)
          c.v.data[c.kv_offset(c.v, b, g, j, d)] = p.v_at(b, g, j, d);
      }
  return c;
}

// Bitwise in the sense of SPEC section 2: +0 equals -0, NaN equals nothing.
void expect_same(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << what << " element " << k;
}

// |got - want| <= rel * max(|want|, 1) elementwise: values of about 1.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], rel * std::max(std::fabs(want[k]), 1.0))
        << what << " element " << k;
  }
}

ForwardResult run(const std::string& name, const Problem& p) {
  p.validate();
  const auto i = impl(name);
  EXPECT_EQ(undeclared_serving_part(i->info(), p), "") << name;
  return i->forward(p);
}

// The largest |a - b| over out.
double out_difference(const ForwardResult& a, const ForwardResult& b) {
  double worst = 0;
  for (size_t k = 0; k < std::min(a.out.size(), b.out.size()); ++k) {
    const double e = std::fabs(a.out[k] - b.out[k]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

constexpr DTypeCombo kF64{DType::f64, DType::f64, DType::f64};
constexpr DTypeCombo kF32Bf16{DType::f32, DType::bf16, DType::f32};

// ---- sinks ----

TEST(Sink, IsInTheNormalisationAndNotTheValues) {
  // One query, keys 0 and 1 with scores 1 and 2 (scale 1), sink 0.5.
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 2, 1, 1);
  p.scale = 1;
  p.q.at(0, 0, 0, 0) = 1;
  p.k.at(0, 0, 0, 0) = 1;
  p.k.at(0, 0, 1, 0) = 2;
  p.v.at(0, 0, 0, 0) = 3;
  p.v.at(0, 0, 1, 0) = -1;
  p.sink = {0.5};
  const long double z = std::exp(0.5L) + std::exp(1.0L) + std::exp(2.0L);
  const auto o = static_cast<double>((3 * std::exp(1.0L) - std::exp(2.0L)) / z);
  const ForwardResult r = run("loop_f64", p);
  ASSERT_EQ(r.status, Status::ok) << r.error;
  // A few roundings of values below 4: 1e-15.
  EXPECT_NEAR(r.out[0], o, 1e-15);
  EXPECT_NEAR(r.lse[0], static_cast<double>(std::log(z)), 1e-15);
  EXPECT_NEAR(r.weights[0] + r.weights[1], static_cast<double>(1 - std::exp(0.5L) / z), 1e-15);
}

TEST(Sink, EqualsAnExtraKeyWithoutValue) {
  // SinkIsAKeyWithoutValue's second form: a key with k = v = 0 whose bias
  // is the sink, on a problem without a window and with causal only
  // bottom-right.
  Problem p = Problem::zeros(DType::f64, 2, 2, 1, 3, 4, 2, 2);
  Values values(3);
  for (Tensor* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = values.next();
  p.causal = true;
  p.align = Align::bottom_right;
  p.sink = {0.75, -1.5};
  Problem key = Problem::zeros(DType::f64, 2, 2, 1, 3, 5, 2, 2);
  key.causal = true;
  key.align = Align::bottom_right;
  key.q = p.q;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t d = 0; d < 2; ++d) {
        key.k.at(b, 0, j + 1, d) = p.k.at(b, 0, j, d);
        key.v.at(b, 0, j + 1, d) = p.v.at(b, 0, j, d);
      }
  key.bias = Broadcast<double>{1, 2, std::vector<double>(2 * 3 * 5, 0.0)};
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i) key.bias->at(0, h, i, 0, 3, 5) = p.sink[static_cast<size_t>(h)];
  const ForwardResult a = run("loop_f64", p), b = run("loop_f64", key);
  ASSERT_EQ(a.status, Status::ok) << a.error;
  ASSERT_EQ(b.status, Status::ok) << b.error;
  // The extra key is summed first, the sink last: 2^-50 of reordering.
  expect_close(a.out, b.out, 1e-15, "out");
  expect_close(a.lse, b.lse, 1e-15, "lse");
}

TEST(Sink, ARowWithoutKeysGivesZeroAndTheSinkNeverAnError) {
  // Sequence 1 has no keys; sequence 0's query 0 none under the causal
  // bottom-right limit (tq_0 = 3 > tk_0 = 2).
  for (const auto& [name, f] : {std::pair<std::string, DTypeCombo>{"loop_f64", kF64},
                                {"loop_f32", kF32Bf16},
                                {"paged_online_f32", kF32Bf16}}) {
    Problem q = packed_problem({3, 1}, {2, 0}, f, 5);
    q.causal = true;
    q.align = Align::bottom_right;
    q.sink = {0.5, -0.25, 1.0, 2.0};
    const ForwardResult r = run(name, q);
    ASSERT_EQ(r.status, Status::ok) << name << ": " << r.error;
    for (int64_t h = 0; h < 4; ++h) {
      for (const auto& [b, i] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}}) {
        EXPECT_EQ(r.lse[row_index(q, b, h, i)], q.sink[static_cast<size_t>(h)]) << name;
        for (int64_t d = 0; d < q.dv; ++d) EXPECT_EQ(r.out[out_index(q, b, h, i, d)], 0.0) << name;
      }
    }
    // Without the sink those rows are empty: an error.
    q.sink.clear();
    const ForwardResult e = run(name, q);
    EXPECT_EQ(e.status, Status::error) << name;
    EXPECT_EQ(e.error, "query (b=0, h=0, i=0) has no allowed key") << name;
  }
}

// L = sum dout . out as a function of one input, for central differences.
double loss(const Problem& p) {
  const ForwardResult r = impl("loop_f64")->forward(p);
  double l = 0;
  for (size_t k = 0; k < r.out.size(); ++k) l += p.dout[k] * r.out[k];
  return l;
}

TEST(Sink, GradientsMatchCentralDifferences) {
  // Packed, so dq / dk / dv come back packed like q and k.
  Problem p = packed_problem({2, 3}, {3, 2}, kF64, 11);
  p.sink = {0.25, -0.5, 1.5, 0.0};
  p.softcap = 3;
  Values values(12);
  p.dout.resize(static_cast<size_t>(p.total_q() * p.heads * p.dv));
  for (double& x : p.dout) x = values.next();
  const BackwardResult g = impl("loop_f64")->backward(p);
  ASSERT_EQ(g.status, Status::ok) << g.error;
  ASSERT_EQ(g.dsink.size(), 4u);
  // Central differences err by h^2 f''' / 6 ~ 1e-10 and by 1e-16 / h
  // rounding ~ 1e-11 at h = 1e-5: 1e-8 is far below a wrong gradient.
  constexpr double kH = 1e-5, kTol = 1e-8;
  const auto check = [&](std::vector<double>& x, const std::vector<double>& grad,
                         const std::string& what) {
    ASSERT_EQ(grad.size(), x.size()) << what;
    for (size_t k = 0; k < x.size(); ++k) {
      const double keep = x[k];
      x[k] = keep + kH;
      const double up = loss(p);
      x[k] = keep - kH;
      const double down = loss(p);
      x[k] = keep;
      EXPECT_NEAR(grad[k], (up - down) / (2 * kH), kTol) << what << " " << k;
    }
  };
  check(p.sink, g.dsink, "dsink");
  check(p.q.data, g.dq, "dq");
  check(p.k.data, g.dk, "dk");
  check(p.v.data, g.dv, "dv");
}

// ---- packed and paged ----

TEST(Packed, EqualsEachSequenceAsItsOwnProblemBitwise) {
  // Lengths 0 and 1, tq_b > tk_b and < tk_b, bottom-right causal with a
  // window, a sink and descales.
  const std::vector<int64_t> q_lens{2, 1, 4, 3}, k_lens{5, 0, 2, 1};
  for (const auto& [name, f] : {std::pair<std::string, DTypeCombo>{"loop_f64", kF64},
                                {"loop_f32", {DType::f32, DType::f32, DType::f32}},
                                {"paged_online_f32", kF32Bf16}}) {
    Problem p = packed_problem(q_lens, k_lens, f, 21);
    p.causal = true;
    p.align = Align::bottom_right;
    p.window_left = 2;
    p.sink = {0.5, 0.25, -1.0, 1.0};
    p.descale = Descales{0.75, 1.5, 0.625};
    const ForwardResult whole = run(name, p);
    ASSERT_EQ(whole.status, Status::ok) << name << ": " << whole.error;
    EXPECT_TRUE(whole.weights.empty()) << name;  // SPEC 1.1: none when packed
    ASSERT_EQ(whole.out.size(), static_cast<size_t>(p.total_q() * p.heads * p.dv));
    for (int64_t b = 0; b < p.batch; ++b) {
      const ForwardResult alone = run(name, sequence_problem(p, b));
      ASSERT_EQ(alone.status, Status::ok) << name << ": " << alone.error;
      const ForwardResult part = sequence_result(p, whole, b);
      expect_same(part.out, alone.out, name + " out of sequence " + std::to_string(b));
      expect_same(part.lse, alone.lse, name + " lse of sequence " + std::to_string(b));
    }
  }
}

TEST(Packed, BackwardEqualsEachSequenceBitwise) {
  // loop_f64, and loop_f32 with fp8 inputs, descales and a bf16 output
  // (gradients rounded to bf16 like out).
  for (const auto& [name, f] : {std::pair<std::string, DTypeCombo>{"loop_f64", kF64},
                                {"loop_f32", {DType::bf16, DType::e4m3, DType::bf16}}}) {
    Problem p = packed_problem({2, 3, 1}, {3, 1, 2}, f, 31);
    p.causal = true;
    p.sink = {0.5, 0.25, -1.0, 1.0};
    if (name == "loop_f32") p.descale = Descales{0.75, 1.5, 0.625};
    Values values(32);
    p.dout.resize(static_cast<size_t>(p.total_q() * p.heads * p.dv));
    for (double& x : p.dout) x = values.next();
    const auto loop = impl(name);
    const BackwardResult whole = loop->backward(p);
    ASSERT_EQ(whole.status, Status::ok) << name << ": " << whole.error;
    std::vector<double> dsink(4, 0.0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const BackwardResult alone = loop->backward(sequence_problem(p, b));
      ASSERT_EQ(alone.status, Status::ok) << alone.error;
      const BackwardResult part = sequence_result(p, whole, b);
      const std::string what = name + " sequence " + std::to_string(b);
      expect_same(part.dq, alone.dq, what + " dq");
      expect_same(part.dk, alone.dk, what + " dk");
      expect_same(part.dv, alone.dv, what + " dv");
      for (size_t h = 0; h < 4; ++h) dsink[h] += alone.dsink[h];
    }
    if (name == "loop_f32") {
      for (double x : whole.dq) EXPECT_TRUE(representable(DType::bf16, x)) << x;
    } else {
      // d sink sums over every sequence, in another order.
      expect_close(whole.dsink, dsink, 1e-15, "dsink");
    }
  }
}

TEST(Paged, EqualsTheContiguousKeysBitwiseWhateverTheStaleSlotsHold) {
  for (const auto& [name, f] : {std::pair<std::string, DTypeCombo>{"loop_f64", kF64},
                                {"loop_f32", {DType::f32, DType::f32, DType::f32}},
                                {"paged_online_f32", {DType::f32, DType::e4m3, DType::f32}}}) {
    // Dense queries (weights returned where declared) and packed ones.
    for (bool packed_q : {false, true}) {
      Problem p =
          packed_problem(packed_q ? std::vector<int64_t>{2, 3, 1} : std::vector<int64_t>{3, 3, 3},
                         {5, 1, 7}, f, 41);
      if (!packed_q) {
        Problem dense = Problem::zeros(f.out, 3, 4, 2, 3, 7, 3, 2);
        Values values(42);
        for (double& x : dense.q.data) x = round_to(f.q, values.next());
        p.q = dense.q;
        p.packed->cu_seqlens_q.clear();
      }
      p.sink = {0.5, 0.25, -1.0, 1.0};
      p.descale = Descales{0.5, 1.25, 0.75};
      p.window_left = 3;
      const ForwardResult want = run(name, p);
      ASSERT_EQ(want.status, Status::ok) << name << ": " << want.error;
      for (int64_t page_size : {1, 3, 16}) {
        // Stale slots of 448 keep every score finite (|q| <= 2, dk 3).
        const ForwardResult got = run(name, paged_from(p, page_size, 448));
        ASSERT_EQ(got.status, Status::ok) << name << ": " << got.error;
        const std::string what = name + " page size " + std::to_string(page_size);
        expect_same(got.out, want.out, what + " out");
        expect_same(got.lse, want.lse, what + " lse");
        expect_same(got.weights, want.weights, what + " weights");
      }
    }
  }
  Problem p = paged_from(packed_problem({1, 1}, {2, 2}, kF64, 43), 2, 0);
  p.dout.assign(static_cast<size_t>(p.total_q() * p.heads * p.dv), 1.0);
  EXPECT_EQ(impl("loop_f64")->backward(p).status, Status::unsupported);  // SPEC 1.1
}

// ---- descales and formats ----

TEST(Descale, PowersOfTwoEqualTheLogicalValuesBitwise) {
  Problem p = packed_problem({2, 3}, {4, 2}, {DType::e4m3, DType::e4m3, DType::f64}, 51);
  p.descale = Descales{0.5, 4, 0.25};
  Problem logical = p;
  logical.descale.reset();
  logical.q_dtype.reset();
  logical.kv_dtype.reset();
  for (double& x : logical.q.data) x *= 0.5;
  for (double& x : logical.k.data) x *= 4;
  for (double& x : logical.v.data) x *= 0.25;
  const ForwardResult a = run("loop_f64", p), b = run("loop_f64", logical);
  ASSERT_EQ(a.status, Status::ok) << a.error;
  expect_same(a.out, b.out, "out");
  expect_same(a.lse, b.lse, "lse");
}

TEST(Kernels, AgreeOnEveryFeatureAtOnce) {
  // f32 q, bf16 K/V: loop_f64 exact on the inputs, loop_f32 and
  // paged_online_f32 within a few f32 roundings (u = 6e-8) of each value
  // of about 1, GQA, sink, packed, bottom-right causal, softcap, descales
  // that are not powers of two.
  Problem p = packed_problem({3, 1, 4}, {6, 2, 3}, kF32Bf16, 61);
  p.causal = true;
  p.align = Align::bottom_right;
  p.softcap = 2.5;
  p.sink = {0.5, 0.25, -1.0, 1.0};
  p.descale = Descales{0.75, 1.5, 0.625};
  Problem p64 = p;
  p64.dtype = DType::f64;
  p64.q_dtype = DType::f32;
  p64.kv_dtype = DType::bf16;
  const ForwardResult want = impl("loop_f64")->forward(p64);
  ASSERT_EQ(want.status, Status::ok) << want.error;
  for (const char* name : {"loop_f32", "paged_online_f32"}) {
    const ForwardResult got = run(name, p);
    ASSERT_EQ(got.status, Status::ok) << name << ": " << got.error;
    expect_close(got.out, want.out, 1e-5, std::string(name) + " out");
    expect_close(got.lse, want.lse, 1e-5, std::string(name) + " lse");
    const ForwardResult paged = run(name, paged_from(p, 2, 0));
    expect_close(paged.out, want.out, 1e-5, std::string(name) + " paged out");
  }
}

TEST(Kernels, ABf16OutputIsRoundedToBf16) {
  Problem p = packed_problem({2, 2}, {3, 3}, {DType::bf16, DType::e4m3, DType::bf16}, 71);
  p.descale = Descales{0.75, 1.5, 0.625};
  for (const char* name : {"loop_f32", "paged_online_f32"}) {
    const ForwardResult r = run(name, p);
    ASSERT_EQ(r.status, Status::ok) << name << ": " << r.error;
    for (double x : r.out) EXPECT_TRUE(representable(DType::bf16, x)) << name << " " << x;
    Problem p32 = p;
    p32.dtype = DType::f32;
    p32.q_dtype = DType::bf16;
    p32.kv_dtype = DType::e4m3;
    const ForwardResult wide = impl("loop_f32")->forward(p32);
    for (size_t k = 0; k < r.out.size(); ++k) {
      EXPECT_NEAR(r.out[k], wide.out[k], std::ldexp(std::fabs(wide.out[k]), -8) * 1.01) << name;
    }
  }
}

// ---- the broken twins ----

struct TwinCase {
  std::string name;
  Problem problem;
};

std::vector<TwinCase> twin_cases() {
  std::vector<TwinCase> cases;
  const DTypeCombo e4m3{DType::f32, DType::e4m3, DType::f32};
  {
    Problem p = packed_problem({2, 2}, {3, 2}, kF32Bf16, 81);
    p.sink = {0.5, 0.25, -1.0, 1.0};
    cases.push_back({"broken_sink_in_numerator", p});
  }
  cases.push_back({"broken_cu_seqlens_off_by_one", packed_problem({2, 2}, {3, 2}, kF32Bf16, 82)});
  {
    // Aligned as if tk_b - tq_b were tk - tq = 3 - 2 = 1: sequence 0
    // (1 query, 3 keys) loses its last key, sequence 1 (2 and 2) gains one.
    Problem p = packed_problem({1, 2}, {3, 2}, kF32Bf16, 83);
    p.causal = true;
    p.align = Align::bottom_right;
    cases.push_back({"broken_packed_align_from_max", p});
  }
  cases.push_back({"broken_block_table_global_index",
                   paged_from(packed_problem({2, 2}, {3, 5}, kF32Bf16, 84), 2, 0)});
  cases.push_back(
      {"broken_paged_stale_tail", paged_from(packed_problem({2, 2}, {3, 5}, kF32Bf16, 85), 4, 3)});
  for (const char* name : {"broken_v_descale_twice", "broken_v_descale_ignored"}) {
    Problem p = packed_problem({2, 2}, {3, 2}, e4m3, 86);
    p.descale = Descales{0.75, 1.5, 0.625};
    cases.push_back({name, p});
  }
  cases.push_back({"broken_e4m3_as_e5m2", packed_problem({2, 2}, {3, 2}, e4m3, 87)});
  cases.push_back({"broken_fp8_p_unscaled", packed_problem({2, 2}, {3, 2}, kF32Bf16, 88)});
  return cases;
}

TEST(ServingPartTwins, EachIsDeclaredLikeTheKernelItBreaks) {
  const ImplInfo& kernel = impl("paged_online_f32")->info();
  for (std::string_view name : test_support::kServingPartTwins) {
    const ImplInfo& twin = impl(std::string(name))->info();
    EXPECT_EQ(twin.kind, Kind::broken) << name;
    EXPECT_EQ(twin.features, kernel.features) << name;
    EXPECT_EQ(twin.precision.p_cast, DType::f32) << name;  // broken_fp8_p_unscaled lies
    EXPECT_EQ(twin.precision.key_block, kernel.precision.key_block) << name;
    for (const DTypeCombo& c : twin.combos) EXPECT_TRUE(kernel.supports(c)) << name;
    EXPECT_TRUE(twin.caught_by == "MatchesOracle" || twin.caught_by == "SinkIsAKeyWithoutValue" ||
                twin.caught_by == "PackedEqualsSeparate" ||
                twin.caught_by == "PagedEqualsContiguous" || twin.caught_by == "DescaleEquivalence")
        << name << " " << twin.caught_by;
  }
  // Every broken implementation of a serving part is in the list, or
  // in the size-dependent one (test_broken_at_size builds its problems).
  for (const auto& i : registered_impls()) {
    if (i->info().kind == Kind::broken && (i->info().features & ATTNCHECK_FEATURE_PAGED_KV)) {
      EXPECT_TRUE(test_support::is_serving_part_twin(i->info().name) ||
                  test_support::caught_only_at_real_size(i->info().name) ||
                  test_support::is_serving_twin(i->info().name))
          << i->info().name;
    }
  }
}

// paged_online_f32 and loop_f64 (on the same inputs, f64 output) agree on
// p within 1e-5; twin `name` is wrong by far more than that.
void expect_wrong_where_the_kernels_agree(const std::string& name, const Problem& p) {
  const ForwardResult correct = run("paged_online_f32", p);
  ASSERT_EQ(correct.status, Status::ok) << name << ": " << correct.error;
  Problem wide = p;
  wide.dtype = DType::f64;
  wide.q_dtype = combo_of(p).q;
  wide.kv_dtype = combo_of(p).kv;
  const ForwardResult reference = impl("loop_f64")->forward(wide);
  ASSERT_EQ(reference.status, Status::ok) << name << ": " << reference.error;
  expect_close(correct.out, reference.out, 1e-5, name + ": paged_online_f32 vs loop_f64");
  const ForwardResult twin = run(name, p);
  ASSERT_EQ(twin.status, Status::ok) << name << ": " << twin.error;
  std::cout << name << ": out differs by " << out_difference(twin, reference) << "\n";
  EXPECT_GT(out_difference(twin, reference), 1e-3) << name;
}

TEST(ServingPartTwins, EachDiffersWhereTheCorrectKernelsAgree) {
  const auto cases = twin_cases();
  ASSERT_EQ(cases.size(), test_support::kServingPartTwins.size());
  for (const TwinCase& c : cases) expect_wrong_where_the_kernels_agree(c.name, c.problem);
}

TEST(ServingPartTwins, EachIsRightWithoutItsTrigger) {
  // A dense problem without sink, descale or fp8: every twin computes what
  // paged_online_f32 does, bitwise (their bugs need serving parts),
  // except the P cast, whose bug is in every problem.
  Problem p = Problem::zeros(DType::bf16, 1, 4, 2, 2, 3, 3, 2);
  Values values(91);
  for (Tensor* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = values.next();
  const ForwardResult correct = run("paged_online_f32", p);
  ASSERT_EQ(correct.status, Status::ok) << correct.error;
  for (std::string_view name : test_support::kServingPartTwins) {
    if (name == "broken_fp8_p_unscaled" || name == "broken_e4m3_as_e5m2") continue;
    const ForwardResult twin = run(std::string(name), p);
    ASSERT_EQ(twin.status, Status::ok) << name;
    expect_same(twin.out, correct.out, std::string(name));
  }
}

// ---- serving twins: batches past 4, padded tables, split K/V ----

struct ServingCase {
  std::string name;
  Problem trigger;  // the twin is wrong here
  Problem below;    // the same kind of problem just short of its trigger
};

// p with its block table cut to the width its lengths need.
Problem tight_table(Problem p) {
  PagedKv& pg = *p.paged;
  const int64_t longest = *std::max_element(pg.seqlens_k.begin(), pg.seqlens_k.end());
  const int64_t stride = (longest + pg.page_size - 1) / pg.page_size;
  std::vector<int64_t> table;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t s = 0; s < stride; ++s)
      table.push_back(pg.block_table[static_cast<size_t>(b * pg.block_table_stride + s)]);
  pg.block_table = table;
  pg.block_table_stride = stride;
  return p;
}

std::vector<ServingCase> serving_cases() {
  std::vector<ServingCase> cases;
  const auto with_sink = [](Problem p) {
    p.sink = {2.0, 2.0, 1.0, 2.0};
    return p;
  };
  // Split-K/V from 257 keys (kPagedSplitKeys): two chunks.
  for (const char* name : {"broken_split_sink_per_chunk", "broken_split_combine_drops_sink"}) {
    cases.push_back({name, with_sink(packed_problem({1}, {300}, kF32Bf16, 101)),
                     with_sink(packed_problem({1}, {256}, kF32Bf16, 101))});
  }
  {
    const auto descaled = [](Problem p) {
      p.descale = Descales{0.75, 1.5, 0.625};
      return p;
    };
    cases.push_back({"broken_split_drops_descales",
                     descaled(packed_problem({1}, {300}, kF32Bf16, 102)),
                     descaled(packed_problem({1}, {256}, kF32Bf16, 102))});
  }
  // A 10-key sequence beside one past the split threshold.
  cases.push_back({"broken_split_reads_max_seqlen_k",
                   packed_problem({1, 1}, {300, 10}, kF32Bf16, 103),
                   packed_problem({1, 1}, {256, 10}, kF32Bf16, 103)});
  {
    // Key 16 (the second 16-key block) scores highest: the rescale drops
    // the sink; 16 keys are one block and never rescale.
    const auto raised = [&](Problem p) {
      for (double& x : p.q.data) x = 1;
      for (int64_t g = 0; g < p.kv_heads; ++g)
        for (int64_t d = 0; d < p.dk; ++d)
          p.k.data[p.kv_offset(p.k, 0, g, p.tk - 1, d)] = 4;
      return with_sink(p);
    };
    cases.push_back({"broken_sink_lost_on_rescale", raised(packed_problem({1}, {17}, kF32Bf16, 104)),
                     raised(packed_problem({1}, {16}, kF32Bf16, 104))});
  }
  cases.push_back({"broken_cu_seqlens_staged_for_4",
                   packed_problem({1, 2, 1, 2, 2}, {2, 3, 2, 3, 3}, kF32Bf16, 105),
                   packed_problem({1, 2, 1, 2}, {2, 3, 2, 3}, kF32Bf16, 105)});
  {
    // paged_from pads the table by one entry; the tight table is right.
    const Problem padded = paged_from(packed_problem({2, 2}, {3, 5}, kF32Bf16, 106), 2, 0);
    cases.push_back({"broken_block_table_stride_from_lengths", padded, tight_table(padded)});
  }
  return cases;
}

TEST(ServingTwins, EachIsWrongAtItsTriggerAndRightJustBelowIt) {
  const auto cases = serving_cases();
  ASSERT_EQ(cases.size(),
            test_support::kServingTwinsAtSize.size() + test_support::kServingTwinsSmall.size());
  for (const ServingCase& c : cases) {
    EXPECT_TRUE(test_support::is_serving_twin(c.name)) << c.name;
    expect_wrong_where_the_kernels_agree(c.name, c.trigger);
    // Short of the trigger it computes what paged_online_f32 does, bitwise.
    const ForwardResult right = run("paged_online_f32", c.below);
    const ForwardResult below = run(c.name, c.below);
    ASSERT_EQ(below.status, Status::ok) << c.name << ": " << below.error;
    expect_same(below.out, right.out, c.name + " below its trigger");
  }
}

// ---- P in E4M3 ----

TEST(Fp8P, ScalingPKeepsTheWeightsTheUnscaledCastLoses) {
  // One key of score 8 and 39 of score 0 (three blocks of 16): the small
  // weights' p_j = e^-8 = 3.4e-4 are below half E4M3's smallest subnormal
  // (2^-10), so the unscaled cast (broken_fp8_p_unscaled) drops them all and
  // the output, 39 e^-8 / Z = 0.0129, becomes 0; online_scaled_e4m3_p casts
  // 256 p_j = 0.086, a normal E4M3 number, and keeps them to 2^-4.
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 40, 1, 1);
  p.kv_dtype = DType::e4m3;
  p.scale = 1;
  p.q.data = {1};
  p.k.data[0] = 8;
  for (int64_t j = 1; j < 40; ++j) p.v.data[static_cast<size_t>(j)] = 1;
  Problem wide = p;
  wide.dtype = DType::f64;
  wide.q_dtype = DType::f32;
  const ForwardResult reference = impl("loop_f64")->forward(wide);
  ASSERT_EQ(reference.status, Status::ok) << reference.error;
  ASSERT_NEAR(reference.out[0], 0.0129, 1e-4);
  const ForwardResult scaled = run("online_scaled_e4m3_p", p);
  const ForwardResult unscaled = run("broken_fp8_p_unscaled", p);
  ASSERT_EQ(scaled.status, Status::ok) << scaled.error;
  ASSERT_EQ(unscaled.status, Status::ok) << unscaled.error;
  EXPECT_LT(out_difference(scaled, reference), reference.out[0] / 16);
  EXPECT_EQ(unscaled.out[0], 0.0);
  EXPECT_EQ(scaled.lse[0], unscaled.lse[0]);  // l sums the unrounded p_j in both
}

TEST(Fp8P, TheScaledKernelAgreesWithPagedOnlineF32OnItsFormats) {
  // The same kernel shape as paged_online_f32 but for the cast: every
  // serving part at once (packed, paged, sinks, descales, GQA), the
  // outputs within E4M3's u_p = 2^-4 of values of about 1.
  const DTypeCombo e4m3{DType::f32, DType::e4m3, DType::f32};
  Problem p = paged_from(packed_problem({2, 3}, {5, 20}, e4m3, 95), 4, 0.5);
  p.sink = {0.5, -0.25, 1.0, 0.0};
  p.descale = Descales{0.75, 1.5, 0.625};
  p.causal = true;
  p.align = Align::bottom_right;
  const ForwardResult correct = run("paged_online_f32", p);
  const ForwardResult scaled = run("online_scaled_e4m3_p", p);
  ASSERT_EQ(correct.status, Status::ok) << correct.error;
  ASSERT_EQ(scaled.status, Status::ok) << scaled.error;
  expect_close(scaled.out, correct.out, 0x1p-4, "online_scaled_e4m3_p vs paged_online_f32");
  expect_close(scaled.lse, correct.lse, 1e-5, "lse");
}

}  // namespace
}  // namespace attncheck
