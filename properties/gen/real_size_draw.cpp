#include "properties/gen/real_size_draw.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attncheck/dtype.h"
#include "core/broadcast.h"
#include "core/transforms.h"
#include "properties/gen/coverage.h"
#include "properties/gen/draws.h"
#include "properties/gen/empty_rows.h"
#include "properties/gen/value_regimes.h"
#include "properties/seeds.h"

namespace attncheck::gen::detail {
namespace {

// t(b, h, i, c) = stored(format, value(x, b, h, i, c)) over the first
// `heads` heads, `rows` rows and `cols` columns of every batch entry, x =
// hash(seed, id, b, h, i, c): the fold of a row's first four kept for its
// columns (the real-size draws hash millions of elements).
template <typename F>
void for_each_element(Tensor& t, uint64_t seed, uint64_t id, int64_t batch, int64_t heads,
                      int64_t rows, int64_t cols, DType format, const F& value) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < rows; ++i) {
        const uint64_t row = fold(fold(fold(fold(seed, id), static_cast<uint64_t>(b)),
                                       static_cast<uint64_t>(h)),
                                  static_cast<uint64_t>(i));
        for (int64_t c = 0; c < cols; ++c) {
          t.at(b, h, i, c) = stored(format, value(fold(row, static_cast<uint64_t>(c)), b, h, i, c));
        }
      }
}

// Regimes at real sizes: those of real data (small integers, a uniform
// grid, near-normal) and, for v, large values. Huge and one-hot regimes
// stay with the small problems, where shrinking explains them.
double seeded_value(Regime regime, uint64_t h, int large_exponent) {
  const auto uniform = [](uint64_t x) { return static_cast<int>(x % 129) - 64; };  // [-64, 64]
  switch (regime) {
    case Regime::small_int: return static_cast<int>(h % 7) - 3;
    case Regime::dyadic: return uniform(h) * 0x1p-6;
    case Regime::large: return std::ldexp(static_cast<int>(h % 7) - 3, large_exponent);
    default: {  // normal: four uniforms
      int s = 0;
      for (int r = 0; r < 4; ++r) s += uniform(h >> (16 * r));
      return s * 0x1p-6;
    }
  }
}

// A value with a full f32 significand (issue 51): x's plain value times
// 1 + m 2^-23, m < 2^13 drawn from the element's hash, rounded to f32.
// The plain values have at most 9 significant bits, so every one is an
// f16 and a kernel that rounds an f32 Q to a 16-bit format (f16 or bf16)
// computes exactly; with the extra bits its rounding moves each element
// by up to 2^-11 of it, far beyond f32's 2^-24 and within every
// tolerance of a q_cast that declares the rounding (SPEC 4.1).
double full_mantissa(uint64_t x, double v) {
  const auto m = static_cast<double>(mix(x ^ 0xF0F0ull) & 0x1FFF);
  return v * (1 + std::ldexp(m, -23));
}

// The block model of Q and K (issue 51) where K/V are a block format and
// a row holds two blocks or more: per batch entry one block of 32
// channels L is Q's outlier block, Q's elements about 1 there and about
// 2^-9 elsewhere, the sign alternating from block to block; K the other
// way round (about 2^-9 in block L, about +-1 elsewhere, signs drawn).
// A q8_0 Q with one scale per block (SPEC 1.2) keeps the small blocks to
// 2^-16 of their size; one scale per row (the largest / 127, half a step
// 2^-7.8) rounds every small element to 0, and the scores lose their
// whole variation across keys. The tolerance's Q8_0 term charges each
// block by its own scale (SPEC 4.1), so a correct kernel stays far within.
void apply_block_model(Problem& p, const SizeShape& s, uint64_t seed, DTypeCombo formats) {
  const int64_t blocks = s.dk / kBlockValues;
  const auto near_one = [](uint64_t x) { return 1 + std::ldexp(static_cast<int>(x % 9) - 4, -5); };
  const auto outlier = [&](int64_t b) {
    return static_cast<int64_t>(hash(seed, 19, static_cast<uint64_t>(b), 0, 0, 0) %
                                static_cast<uint64_t>(blocks));
  };
  if (!s.zero_queries)
    for_each_element(p.q, seed, 20, s.batch, s.heads, s.tq, s.dk, formats.q,
                     [&](uint64_t x, int64_t b, int64_t, int64_t, int64_t c) {
                       const int64_t block = c / kBlockValues;
                       const double m = block == outlier(b) ? 1.0 : 0x1p-9;
                       const double v = (block % 2 ? -m : m) * near_one(x);
                       return formats.q == DType::f32 ? full_mantissa(x, v) : v;
                     });
  for_each_element(p.k, seed, 21, s.batch, s.kv_heads, s.tk, s.dk, formats.kv,
                   [&](uint64_t x, int64_t b, int64_t, int64_t, int64_t c) {
                     const double m = c / kBlockValues == outlier(b) ? 0x1p-9 : 1.0;
                     return (x >> 8 & 1 ? -m : m) * near_one(x);
                   });
  count("block model");
}

// The value regime of a real-size draw (generators.h: SizeRegime) over
// the plain values already drawn: each element still a function of the
// seed and its position (the dominant key of a K/V head is a function of
// the seed and tk), rounded to its tensor's format. q = 0 (zero_queries)
// stays 0.
void apply_size_regime(Problem& p, const SizeShape& s, uint64_t seed, DTypeCombo formats,
                       const GenSpec& spec) {
  const auto each = [&](Tensor& t, uint64_t id, int64_t heads, int64_t rows, int64_t cols,
                        DType format, const auto& value) {
    for_each_element(t, seed, id, s.batch, heads, rows, cols, format, value);
  };
  // 1 + d, d in [-1/8, 1/8] on a 2^-5 grid: exact in every format but
  // fp8, whose rounding moves it by at most 1/16.
  const auto near_one = [](uint64_t x) { return 1 + std::ldexp(static_cast<int>(x % 9) - 4, -5); };
  const double root_dk = std::sqrt(static_cast<double>(s.dk));
  const bool zero_q = s.zero_queries;
  const auto flat_q = [&] {  // |q| <= 2^-6 on a 2^-12 grid
    if (!zero_q)
      each(p.q, 11, s.heads, s.tq, s.dk, formats.q, [](uint64_t x, auto...) {
        return std::ldexp(static_cast<int>(x % 129) - 64, -12);
      });
  };
  switch (s.regime) {
    case SizeRegime::plain: return;
    case SizeRegime::near_flat: flat_q(); return;
    case SizeRegime::far_below: {
      // s = scale q.k = -(a b dk / sqrt(dk)) (1 + d)(1 + d') with a b = 160 /
      // sqrt(dk): between -160 (7/8)^2 (1 - 1/16)^2 = -108 (fp8 rounding
      // included) and -160 (9/8)^2 (17/16)^2 = -229.
      const double a = std::sqrt(160 / root_dk);
      if (!zero_q)
        each(p.q, 12, s.heads, s.tq, s.dk, formats.q,
             [&](uint64_t x, auto...) { return a * near_one(x); });
      each(p.k, 13, s.kv_heads, s.tk, s.dk, formats.kv,
           [&](uint64_t x, auto...) { return -a * near_one(x); });
      return;
    }
    case SizeRegime::large: {
      // tk values of 3 2^e sum below 2^(ilogb(range) - 1): within the
      // narrowest of the declared pv_accum, v's and the output's formats,
      // at 1/4 of it.
      flat_q();
      const double range =
          std::min({spec.pv_range, format_max_value(formats.kv), max_finite(spec.dtype)});
      const int e = std::ilogb(range) - 3 - std::ilogb(static_cast<double>(s.tk));
      // Unnormalised sums over tk keys are in range; v itself at most
      // 3 2^(ilogb(v's format) - 2).
      const int e_v = std::min(e, std::ilogb(format_max_value(formats.kv)) - 2);
      each(p.v, 14, s.kv_heads, s.tk, s.dv, formats.kv,
           [&](uint64_t x, int64_t b, int64_t h, int64_t, int64_t c) {
             const uint64_t column = hash(seed, 15, static_cast<uint64_t>(b),
                                          static_cast<uint64_t>(h), static_cast<uint64_t>(c), 0);
             return (column & 1 ? -1.0 : 1.0) * std::ldexp(static_cast<double>(1 + x % 3), e_v);
           });
      return;
    }
    case SizeRegime::dominant_key: {
      // q in [7/8, 9/8] (elementwise > 0), the other keys as drawn
      // (scores of a few units); the dominant key's elements are 128 /
      // sqrt(dk) (1 + d), its scores 128 (1 + d)(1 + d') in [98, 162]
      // ([87, 182] after fp8 rounding), dk of them averaging d to about
      // 128: above e^88.7, f32's overflow point, over a max of the others.
      if (!zero_q)
        each(p.q, 16, s.heads, s.tq, s.dk, formats.q,
             [&](uint64_t x, auto...) { return near_one(x); });
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t g = 0; g < s.kv_heads; ++g) {
          const int64_t j = static_cast<int64_t>(
              hash(seed, 17, static_cast<uint64_t>(b), static_cast<uint64_t>(g), 0, 0) %
              static_cast<uint64_t>(s.tk));
          for (int64_t c = 0; c < s.dk; ++c) {
            const uint64_t x = hash(seed, 18, static_cast<uint64_t>(b), static_cast<uint64_t>(g),
                                    static_cast<uint64_t>(c), 0);
            p.k.at(b, g, j, c) = stored(formats.kv, 128 / root_dk * near_one(x));
          }
        }
      return;
    }
  }
}

// The structure of a real-size shape beyond causal and key padding (SPEC
// 3's covering set: a window, an explicit mask, bias, softcap), each where
// the spec's features allow it, the mask and the bias a function of the
// seed and each element's position like the values, so the size search
// keeps them where they were while it shrinks the shape.
void add_size_structure(Problem& p, const SizeShape& s, const GenSpec& spec, uint64_t seed) {
  const auto has = [&](Features bit) { return (spec.features & bit) != 0; };
  if (s.windowed() && has(ATTNCHECK_FEATURE_WINDOW)) {
    p.window_left = s.window_left;
    p.window_right = s.window_right;
    p.align = s.align;
    if (p.align == Align::bottom_right && !has(ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT)) {
      p.align = Align::top_left;
    }
    if (p.align == Align::top_left && !has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)) {
      p.align = Align::bottom_right;
    }
  }
  if (s.explicit_mask && has(ATTNCHECK_FEATURE_MASK)) {  // about one key in 8 disallowed
    p.mask = make_broadcast<uint8_t>(
        p.batch, p.heads, p.tq, p.tk, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
          const uint64_t x = hash(seed, 10, static_cast<uint64_t>(b), static_cast<uint64_t>(h),
                                  static_cast<uint64_t>(i), static_cast<uint64_t>(j));
          return x % 8 != 0;
        });
  }
  if (s.bias && has(ATTNCHECK_FEATURE_BIAS)) {  // per head, multiples of 1/8 in [-2, 2]
    p.bias = make_broadcast<double>(
        1, p.heads, p.tq, p.tk, [&](int64_t, int64_t h, int64_t i, int64_t j) {
          const uint64_t x = hash(seed, 11, 0, static_cast<uint64_t>(h), static_cast<uint64_t>(i),
                                  static_cast<uint64_t>(j));
          return round_to(spec.dtype, std::ldexp(static_cast<int>(x % 33) - 16, -3));
        });
  }
  if (s.softcap > 0 && has(ATTNCHECK_FEATURE_SOFTCAP)) p.softcap = s.softcap;
  if (counting()) {
    if (p.window_left >= 0 || p.window_right >= 0) count("real size window");
    if (p.causal) {
      count(p.align == Align::top_left ? "real size causal_top_left"
                                       : "real size causal_bottom_right");
    }
    if (p.mask) count("real size mask");
    if (!p.key_valid.empty()) count("real size key_padding");
    if (p.bias) count("real size bias");
    if (p.softcap > 0) count(p.mask || !p.key_valid.empty() || p.causal || p.window_left >= 0 ||
                                     p.window_right >= 0
                                 ? "real size softcap with a mask"
                                 : "real size softcap, no mask");
  }
}

}  // namespace

Problem draw_sized(const GenSpec& spec, DTypeCombo formats) {
  SizeShape s = *spec.size;
  const auto has = [&](Features bit) { return (spec.features & bit) != 0; };
  const uint64_t seed = *rc::gen::resize(100, rc::gen::arbitrary<uint64_t>());
  if (spec.require_gqa && s.kv_heads == s.heads) {
    if (s.heads == 1) s.heads = 2;
    s.kv_heads = std::max<int64_t>(1, s.heads / 2);
    while (s.heads % s.kv_heads) --s.kv_heads;
  }
  if (spec.require_causal) s.causal = true;
  if (is_block_format(formats.kv)) {  // SPEC 1.2: rows of whole blocks of 32
    s.dk = kBlockValues * ((s.dk + kBlockValues - 1) / kBlockValues);
    s.dv = kBlockValues * ((s.dv + kBlockValues - 1) / kBlockValues);
  }
  Problem p = Problem::zeros(spec.dtype, s.batch, s.heads, s.kv_heads, s.tq, s.tk, s.dk, s.dv);
  if (formats.q != spec.dtype) p.q_dtype = formats.q;
  if (formats.kv != spec.dtype) p.kv_dtype = formats.kv;
  p.causal = s.causal;
  p.align = s.align;
  if (p.causal && p.align == Align::bottom_right && !has(ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT)) {
    p.align = Align::top_left;
  }
  if (p.causal && p.align == Align::top_left && !has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)) {
    p.align = Align::bottom_right;
  }
  if (p.align == Align::bottom_right && p.causal && p.tq > p.tk) p.align = Align::top_left;
  if (spec.require_window) {  // a band of about an eighth of the keys
    p.window_left = 1 + static_cast<int64_t>(hash(seed, 9, 0, 0, 0, 0) % static_cast<uint64_t>(s.tk / 8 + 1));
    p.window_right = static_cast<int64_t>(hash(seed, 9, 1, 0, 0, 0) % 2) ? 0 : -1;
    if (!p.causal && p.window_right < 0) p.window_right = p.window_left;
  }
  if (s.key_padding) {  // each batch's tail: up to a quarter of the keys
    p.key_valid.assign(static_cast<size_t>(s.batch * s.tk), 1);
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t pad = static_cast<int64_t>(hash(seed, 8, static_cast<uint64_t>(b), 0, 0, 0) %
                                               static_cast<uint64_t>(s.tk / 4 + 1));
      for (int64_t j = s.tk - pad; j < s.tk; ++j) p.key_valid[static_cast<size_t>(b * s.tk + j)] = 0;
    }
  }
  const double first_order = std::log2(0.01 / unit_roundoff(spec.dtype));
  const int qk_large = static_cast<int>(std::floor(
      (first_order - 2 - std::log2(9.0 * static_cast<double>(s.dk))) / 2));
  // v: tk values of 3 2^e sum below the output's largest finite value (an
  // unnormalised accumulator of the output's width holds them).
  const int v_limit = std::ilogb(max_finite(spec.dtype)) - 3 - std::ilogb(static_cast<double>(s.tk));
  const int v_large = std::min(6, v_limit);
  constexpr Regime kQkRegimes[] = {Regime::normal, Regime::dyadic, Regime::small_int};
  constexpr Regime kVRegimes[] = {Regime::normal, Regime::dyadic, Regime::small_int, Regime::large,
                                  Regime::fp8_edges};
  const auto fill = [&](Tensor& t, uint64_t id, int64_t heads, int64_t rows, int64_t cols, bool is_v,
                        DType format) {
    const uint64_t r = hash(seed, id, 99, 0, 0, 0);
    // fp8 values: their format's ends too (SPEC 3), the top within v's limit.
    const bool fp8 = format == DType::e4m3 || format == DType::e5m2;
    const uint64_t v_regimes = fp8 ? 5 : 4;
    const Regime regime =
        s.small_values ? Regime::small_int : is_v ? kVRegimes[r % v_regimes] : kQkRegimes[r % 3];
    count(std::string("regime ") + regime_name(regime));
    const int large = is_v ? v_large : std::min(qk_large, 3);
    // Q in f32 beside narrower K/V (issue 51): full significands, so a
    // kernel that rounds Q to K's format without declaring it (q_cast)
    // shows; K, V and Q in its own format elsewhere keep their grids.
    const bool full = id == 1 && !s.small_values && format == DType::f32 &&
                      formats.kv != DType::f32 && formats.kv != DType::f64;
    if (full) count("full-mantissa q");
    const double top = format_top(format, v_limit);
    const double tiny = format == DType::e4m3 ? 0x1p-9 : 0x1p-16;
    for_each_element(t, seed, id, s.batch, heads, rows, cols, format, [&](uint64_t x, auto...) {
      if (regime == Regime::fp8_edges) {  // the top, the smallest subnormals, small values
        const double m[] = {top, tiny, 3 * tiny, static_cast<double>(x >> 8 & 7) * 0x1p-2};
        return (x >> 4 & 1 ? -1 : 1) * m[x % 4];
      }
      return full ? full_mantissa(x, seeded_value(regime, x, large)) : seeded_value(regime, x, large);
    });
  };
  if (!s.zero_queries) fill(p.q, 1, s.heads, s.tq, s.dk, false, formats.q);
  fill(p.k, 2, s.kv_heads, s.tk, s.dk, false, formats.kv);
  fill(p.v, 3, s.kv_heads, s.tk, s.dv, true, formats.kv);
  if (!s.small_values && s.regime == SizeRegime::plain && is_block_format(formats.kv) &&
      s.dk >= 2 * kBlockValues) {
    apply_block_model(p, s, seed, formats);
  }
  if (!s.small_values && s.regime != SizeRegime::plain) {
    apply_size_regime(p, s, seed, formats, spec);
    count(std::string("size regime ") + size_regime_name(s.regime));
  }
  // Block K/V: the drawn values rounded per block as ggml's quantizer
  // would; the regimes' values keep their sizes within a block's step.
  round_kv_to_blocks(p);
  add_size_structure(p, s, spec, seed);
  if (Coverage* c = counting()) {
    ++c->problems;
    count("real size");
  }
  repair_empty_rows(p);
  return p;
}

int64_t real_size_length(int64_t lo, int64_t n) {
  switch (pick(3)) {
    case 0: return n;
    case 1: {
      std::vector<int64_t> straddling;
      for (int64_t g : length_grid())
        if (g >= std::max<int64_t>(lo, 15) && g <= n && (g & (g - 1)) != 0) straddling.push_back(g);
      if (!straddling.empty())
        return straddling[static_cast<size_t>(pick(static_cast<int64_t>(straddling.size())))];
      return n;
    }
    default: return *rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, n + 1));
  }
}

ServingPlan size_plan(const GenSpec& spec, bool any_combo) {
  const auto k = static_cast<size_t>(spec.size->variant);
  ServingPlan plan;
  if (any_combo) plan.combo = k % spec.combos.size();
  const int sink = spec.size->sink;
  plan.sink = must_have(spec, ATTNCHECK_FEATURE_SINK) ||
              (may_have(spec, ATTNCHECK_FEATURE_SINK) && (sink >= 0 ? sink == 1 : k % 2 == 1));
  plan.descale = must_have(spec, ATTNCHECK_FEATURE_DESCALE) ||
                 (may_have(spec, ATTNCHECK_FEATURE_DESCALE) && (k % 4 == 1 || k % 4 == 2));
  const std::vector<ServingPlan> layouts = layout_choices(spec);
  return with_layout_of(plan, layouts[(k / 3) % layouts.size()]);
}

SizeShape as_sequences(SizeShape s) {
  const int64_t sequences = s.sequences > 0 ? s.sequences : 5 + (s.variant * 5) % 12;
  int64_t factor = std::max<int64_t>(1, sequences / s.batch);
  const int64_t group = s.heads / s.kv_heads;
  while (factor > 1 && s.kv_heads > 1) {
    s.kv_heads = std::max<int64_t>(1, s.kv_heads / 2);
    factor = (factor + 1) / 2;
  }
  s.heads = s.kv_heads * group;
  s.tq = std::max<int64_t>(1, s.tq / factor);
  s.batch = sequences;
  return s;
}

}  // namespace attncheck::gen::detail
