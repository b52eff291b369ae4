#include "properties/gen/generators.h"
#include "properties/seeds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/transforms.h"

namespace attncheck::gen {
namespace {

using rc::gen::inRange;

// RapidCheck scales inRange by the case's size, which grows from 0 over a
// run: right for dims (small problems first), wrong for choices among
// kinds, which must all occur at every size. `pick` draws at full size.

// Integer index in [0, n), at any size, shrinking towards 0 (the simplest).
int64_t pick(int64_t n) { return *rc::gen::resize(100, inRange<int64_t>(0, n)); }

// Integer index in [0, n), growing with the case's size (for dims).
int64_t grow(int64_t n) { return *inRange<int64_t>(0, n); }

bool coin() { return *rc::gen::arbitrary<bool>(); }

// An integer in [-n, n] that shrinks towards 0 through 1, -1, 2, -2, ...
// (inRange alone shrinks towards its lower bound).
int small_int(int n) {
  const int k = *inRange(0, 2 * n + 1);
  return k % 2 ? (k + 1) / 2 : -(k / 2);
}

// Mostly 1 (allowed), shrinking towards 1 so masks shrink to all-allowed.
uint8_t mostly_allowed() {
  return *rc::gen::resize(100, rc::gen::weightedElement<uint8_t>({{3, uint8_t{1}}, {1, uint8_t{0}}}));
}

Coverage* coverage = nullptr;  // set by CoverageScope

void count(const std::string& what) {
  if (coverage) ++coverage->counts[what];
}

constexpr const char* kSizeRegimeNames[] = {"plain values", "near-flat scores",
                                            "scores far below 0", "large values",
                                            "one dominant key"};

constexpr const char* kRegimeNames[] = {"small_int", "dyadic",    "normal",    "large",
                                        "huge",      "one_hot",   "all_equal", "near_tied",
                                        "fp8_edges"};

// The largest value a tensor of format `d` may hold within its limit
// 3 * 2^limit_exponent (draw_dense's safe limits): the top of an fp8
// format (E4M3's 448, whose binade 256-448 decoders mistake for NaN;
// E5M2's 57344) where the limit allows.
double format_top(DType d, int limit_exponent) {
  // 3 2^e is in every format (two significant bits), and so is its largest finite value.
  return std::min(format_max_value(d), 3 * std::ldexp(1.0, limit_exponent));
}

// x in `format` at a real size: rounded to an element format; a block
// format's values are rounded with their block once the tensor is filled
// (draw_sized's round_kv_to_blocks).
double stored(DType format, double x) { return is_block_format(format) ? x : round_to(format, x); }

// Values of one tensor from one regime. `huge_exponent` is the tensor's own
// safe limit: for q and k the largest power of two that keeps scores within
// the first-order analysis, for v the largest that keeps sums of tk values
// finite. `large_exponent` caps the large regime the same way where scores
// are stored in a coarse format.
std::vector<double> values(int64_t n, DType dtype, int huge_exponent, int large_exponent) {
  const bool fp8 = dtype == DType::e4m3 || dtype == DType::e5m2;
  const auto regime = static_cast<Regime>(pick(fp8 ? 9 : 8));
  count(std::string("regime ") + kRegimeNames[static_cast<int>(regime)]);
  if (coverage) ++coverage->tensors;
  std::vector<double> x(static_cast<size_t>(n), 0.0);
  switch (regime) {
    case Regime::small_int:
      for (double& e : x) e = small_int(3);
      break;
    case Regime::dyadic:  // uniform on a 2^-6 grid in [-1, 1]
      for (double& e : x) e = std::ldexp(small_int(64), -6);
      break;
    case Regime::normal:  // sum of four uniforms: near-normal, sd ~ 1.2
      for (double& e : x) {
        int s = 0;
        for (int r = 0; r < 4; ++r) s += small_int(64);
        e = std::ldexp(s, -6);
      }
      break;
    case Regime::large: {  // up to 3 * 2^6: scores up to ~1e5, still first-order
      const int exponent = std::min(*inRange(3, 7), large_exponent);
      for (double& e : x) e = std::ldexp(small_int(3), exponent);
      break;
    }
    case Regime::huge: {  // small integers times 2^huge_exponent, shrinking down
      // Within the format too: 3 2^e below its largest finite value.
      const int e_max = std::min(huge_exponent, std::ilogb(max_finite(dtype)) - 2);
      for (double& e : x) e = std::ldexp(small_int(3), e_max - static_cast<int>(pick(4)));
      break;
    }
    case Regime::one_hot:
      x[static_cast<size_t>(pick(n))] = *inRange(1, 4);
      break;
    case Regime::all_equal: {
      const double c = std::ldexp(small_int(16), -2);
      std::fill(x.begin(), x.end(), c);
      break;
    }
    case Regime::near_tied: {  // one value plus perturbations 2^-20 apart
      const double c = small_int(3);
      for (double& e : x) e = c + std::ldexp(small_int(2), -20);
      break;
    }
    case Regime::fp8_edges: {
      // The largest value the tensor may hold (the format's largest finite
      // value where the tensor's limit allows it: E4M3's top binade
      // 256-448, E5M2's 57344) and its smallest subnormals (2^-9 for E4M3,
      // 2^-16 for E5M2).
      const double big = format_top(dtype, huge_exponent);
      const int tiny = dtype == DType::e4m3 ? -9 : -16;
      for (double& e : x) {
        const int64_t k = pick(4);
        const double m = k == 0 ? big : k == 1 ? std::ldexp(1.0, tiny)
                       : k == 2 ? std::ldexp(3.0, tiny) : std::ldexp(small_int(3), -2);
        e = coin() ? -m : m;
      }
      break;
    }
  }
  for (double& e : x) e = round_to(dtype, e);
  return x;
}

// Values of a K or V tensor in the block format d (SPEC 1.2): n values, n
// a multiple of 32 (rows of dk or dv, multiples of 32), each 32 one exact
// block drawn as a scale and integers, so that shrinking goes to smaller
// integers and the plain scale. Kinds (one per block): plain (a power of two
// at or below the tensor's limit, integers anywhere in the format's range),
// a zero scale, the extreme integers (q8_0's -128 and 127, q4_0's -8 and
// 7), the largest scale the limit allows (f16's largest finite, 65504,
// where it allows that much, as for v under an f32 output), and a
// subnormal f16 scale. q4_0 scales take either sign (ggml's d = max / -8 is
// negative for a positive max); q8_0's too, which ggml does not write but
// a block holds. `top` is the tensor's largest magnitude (3 2^huge, as
// values() uses).
std::vector<double> block_values(int64_t n, DType d, double top) {
  std::vector<double> x(static_cast<size_t>(n), 0.0);
  const int lo = block_int_min(d), hi = block_int_max(d);
  const double bound = -lo;  // the largest integer magnitude, 128 or 8
  // The largest f16 power of two, and the largest f16 value (11
  // significant bits, truncated), whose blocks stay within top.
  const double limit = top / bound;
  const int e_plain = std::min(15, std::ilogb(limit));
  const double top_scale = std::min(
      max_finite(DType::f16),
      std::ldexp(std::floor(std::ldexp(limit, 10 - std::ilogb(limit))), std::ilogb(limit) - 10));
  constexpr const char* kKinds[] = {"block plain", "block zero scale", "block extreme integers",
                                    "block top scale", "block subnormal scale"};
  for (int64_t start = 0; start < n; start += kBlockValues) {
    const int64_t kind = pick(5);
    count(kKinds[kind]);
    double scale = std::ldexp(1.0, std::max(e_plain - static_cast<int>(pick(8)), -24));
    if (kind == 1) scale = 0;
    if (kind == 3) scale = round_to(DType::f16, top_scale);
    if (kind == 3 && scale == max_finite(DType::f16)) count("block scale f16's largest finite");
    if (kind == 4) scale = std::ldexp(static_cast<double>(1 + pick(1023)), -24);
    if (coin()) {
      scale = -scale;
      count("block negative scale");
    }
    for (int64_t t = 0; t < kBlockValues; ++t) {
      // Every kind makes the same draws, so that shrinking the kind to
      // plain keeps the integers in place (and shrinks them from there).
      const int64_t extreme = pick(3);
      const int q = std::clamp(small_int(hi), lo, hi);
      x[static_cast<size_t>(start + t)] =
          scale * (kind == 2 && extreme == 1 ? lo : kind == 2 && extreme == 2 ? hi : q);
    }
  }
  return x;
}

// `pad` is the unit of a padded layout's gaps: 1, or 32 for a block
// format, whose strides stay whole blocks (SPEC 1.2).
Tensor lay_out(const std::vector<double>& x, std::array<int64_t, 4> shape, Layout layout,
               int64_t pad = 1) {
  const auto [d0, d1, d2, d3] = shape;
  Tensor t;
  if (layout == Layout::bthd) {
    t.strides = {d2 * d1 * d3, d3, d1 * d3, 1};
  } else if (layout == Layout::padded) {
    const int64_t s2 = d3 + pad, s1 = d2 * s2 + 2 * pad, s0 = d1 * s1 + 3 * pad;
    t.strides = {s0, s1, s2, 1};
  } else {
    t.strides = contiguous_strides(d0, d1, d2, d3);
  }
  const int64_t size = (d0 - 1) * t.strides[0] + (d1 - 1) * t.strides[1] +
                       (d2 - 1) * t.strides[2] + (d3 - 1) * t.strides[3] + 1;
  t.data.assign(static_cast<size_t>(size), std::numeric_limits<double>::quiet_NaN());
  size_t k = 0;
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c)
        for (int64_t d = 0; d < d3; ++d) t.at(a, b, c, d) = x[k++];
  return t;
}

std::vector<int64_t> allowed_dims(int64_t lo, int64_t hi, int64_t multiple) {
  std::vector<int64_t> dims;
  for (int64_t d = std::max<int64_t>(1, lo); d <= hi; ++d) {
    if (multiple <= 0 || d % multiple == 0) dims.push_back(d);
  }
  if (dims.empty()) dims.push_back(multiple > 0 ? std::max(lo, multiple) : std::max<int64_t>(1, lo));
  return dims;
}

int64_t limited(int64_t max_value, int64_t limit) {
  return limit > 0 ? std::min(max_value, limit) : max_value;
}

// Structurally (causal and window) allowed first key of query i, or -1.
int64_t first_structural_key(const Problem& p, int64_t i) {
  const int64_t pos = p.position(i);
  for (int64_t j = 0; j < p.tk; ++j) {
    if (p.causal && j > pos) continue;
    if (p.window_left >= 0 && j < pos - p.window_left) continue;
    if (p.window_right >= 0 && j > pos + p.window_right) continue;
    return j;
  }
  return -1;
}

bool structure_leaves_empty_row(const Problem& p) {
  for (int64_t i = 0; i < p.tq; ++i)
    if (first_structural_key(p, i) < 0) return true;
  return false;
}

// Makes every row non-empty without drawing anything new: first unbound the
// window where it excludes every key, then re-allow each row's first
// structurally allowed key in the key padding and the mask.
void repair_empty_rows(Problem& p) {
  if (structure_leaves_empty_row(p)) p.window_left = -1;
  if (structure_leaves_empty_row(p)) p.window_right = -1;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        if (p.allowed_count(b, h, i) > 0) continue;
        const int64_t j = first_structural_key(p, i);
        if (!p.key_valid.empty()) p.key_valid[static_cast<size_t>(b * p.tk + j)] = 1;
        if (p.mask) p.mask->at(b, h, i, j, p.tq, p.tk) = 1;
      }
}

template <typename T, typename Draw>
Broadcast<T> broadcast(const Problem& p, Draw draw) {
  Broadcast<T> m;
  m.batch = coin() ? p.batch : 1;
  m.heads = coin() ? p.heads : 1;
  m.data.resize(static_cast<size_t>(m.batch * m.heads * p.tq * p.tk));
  for (T& x : m.data) x = draw();
  return m;
}

// One part of a problem as one RapidCheck ingredient. RapidCheck replays a
// shrink by position in the sequence of draws; a part whose size depends on
// earlier draws (a tensor of tq rows, a window's two bounds) would shift
// every later draw when those shrink. As one ingredient each, parts keep
// their positions, so shrinking tq leaves K and V as they were.
template <typename F>
auto part(F f) {
  return *rc::gen::exec(std::move(f));
}

struct Dims {
  int64_t batch, heads, kv_heads, tq, tk, dk, dv;
};

struct Structure {
  bool causal = false, window = false;
  Align align = Align::top_left;
  int64_t left = -1, right = -1;
};

// A seed and an element's position folded through mix(): values that do not
// move when a dim shrinks.
uint64_t fold(uint64_t x, uint64_t y) {
  x ^= y + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2);
  return mix(x);
}

uint64_t hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  return fold(fold(fold(fold(fold(seed, a), b), c), d), e);
}

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
    Broadcast<uint8_t> m;
    m.batch = p.batch;
    m.heads = p.heads;
    m.data.resize(static_cast<size_t>(p.batch * p.heads * p.tq * p.tk));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j) {
            const uint64_t x = hash(seed, 10, static_cast<uint64_t>(b), static_cast<uint64_t>(h),
                                    static_cast<uint64_t>(i), static_cast<uint64_t>(j));
            m.at(b, h, i, j, p.tq, p.tk) = x % 8 != 0;
          }
    p.mask = std::move(m);
  }
  if (s.bias && has(ATTNCHECK_FEATURE_BIAS)) {  // per head, multiples of 1/8 in [-2, 2]
    Broadcast<double> m;
    m.heads = p.heads;
    m.data.resize(static_cast<size_t>(p.heads * p.tq * p.tk));
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          const uint64_t x = hash(seed, 11, 0, static_cast<uint64_t>(h), static_cast<uint64_t>(i),
                                  static_cast<uint64_t>(j));
          m.at(0, h, i, j, p.tq, p.tk) =
              round_to(spec.dtype, std::ldexp(static_cast<int>(x % 33) - 16, -3));
        }
    p.bias = std::move(m);
  }
  if (s.softcap > 0 && has(ATTNCHECK_FEATURE_SOFTCAP)) p.softcap = s.softcap;
  if (coverage) {
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

// A problem of exactly spec.size's shape (within the features and the
// require_* of the spec) in the input formats `formats`, its values a
// function of one drawn seed and each element's position.
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
    count(std::string("regime ") + kRegimeNames[static_cast<int>(regime)]);
    const int large = is_v ? v_large : std::min(qk_large, 3);
    const double top = format_top(format, v_limit);
    const double tiny = format == DType::e4m3 ? 0x1p-9 : 0x1p-16;
    for_each_element(t, seed, id, s.batch, heads, rows, cols, format, [&](uint64_t x, auto...) {
      if (regime == Regime::fp8_edges) {  // the top, the smallest subnormals, small values
        const double m[] = {top, tiny, 3 * tiny, static_cast<double>(x >> 8 & 7) * 0x1p-2};
        return (x >> 4 & 1 ? -1 : 1) * m[x % 4];
      }
      return seeded_value(regime, x, large);
    });
  };
  if (!s.zero_queries) fill(p.q, 1, s.heads, s.tq, s.dk, false, formats.q);
  fill(p.k, 2, s.kv_heads, s.tk, s.dk, false, formats.kv);
  fill(p.v, 3, s.kv_heads, s.tk, s.dv, true, formats.kv);
  if (!s.small_values && s.regime != SizeRegime::plain) {
    apply_size_regime(p, s, seed, formats, spec);
    count(std::string("size regime ") + size_regime_name(s.regime));
  }
  // Block K/V: the drawn values rounded per block as ggml's quantizer
  // would; the regimes' values keep their sizes within a block's step.
  round_kv_to_blocks(p);
  add_size_structure(p, s, spec, seed);
  if (coverage) {
    ++coverage->problems;
    count("real size");
  }
  repair_empty_rows(p);
  return p;
}

// `max_batch`: spec.max_bh for a dense problem, spec.max_sequences for
// one that make_varlen cuts into sequences.
Problem draw_dense(const GenSpec& spec, DTypeCombo formats, int64_t max_batch) {
  if (spec.size) return draw_sized(spec, formats);
  const Features f = spec.features;
  const auto has = [f](Features bit) { return (f & bit) != 0; };

  Dims n = part([spec, has, max_batch] {
    const Limits& lim = spec.limits;
    Dims d{};
    d.batch = *inRange<int64_t>(1, max_batch + 1);
    if (lim.max_batch_heads > 0) d.batch = std::min(d.batch, lim.max_batch_heads);
    d.heads = *inRange<int64_t>(1, spec.max_bh + 1);
    if (lim.max_batch_heads > 0) d.heads = std::max<int64_t>(1, std::min(d.heads, lim.max_batch_heads / d.batch));
    if (spec.require_gqa) d.heads = std::max<int64_t>(d.heads, 2);
    d.kv_heads = d.heads;
    if (has(ATTNCHECK_FEATURE_GQA)) {
      std::vector<int64_t> divisors;  // heads first: plain MHA is the simplest
      for (int64_t k = spec.require_gqa ? d.heads / 2 : d.heads; k >= 1; --k)
        if (d.heads % k == 0) divisors.push_back(k);
      d.kv_heads = divisors[static_cast<size_t>(pick(static_cast<int64_t>(divisors.size())))];
    }
    d.tq = *inRange<int64_t>(1, limited(spec.max_t, lim.max_tq) + 1);
    d.tk = *inRange<int64_t>(1, limited(spec.max_t, lim.max_tk) + 1);
    const auto dks = allowed_dims(lim.dk_min, limited(spec.max_d, lim.dk_max), lim.dk_multiple);
    d.dk = dks[static_cast<size_t>(grow(static_cast<int64_t>(dks.size())))];
    d.dv = lim.dv_equals_dk ? d.dk : *inRange<int64_t>(1, spec.max_d + 1);
    return d;
  });
  const bool blocks = is_block_format(formats.kv);
  if (blocks) {  // SPEC 1.2: rows of whole blocks of 32
    n.dk = kBlockValues * ((n.dk + kBlockValues - 1) / kBlockValues);
    n.dv = kBlockValues * ((n.dv + kBlockValues - 1) / kBlockValues);
  }

  const Structure st = part([spec, has, tk = n.tk] {
    std::vector<Align> aligns;
    if (has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)) aligns.push_back(Align::top_left);
    if (has(ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT)) aligns.push_back(Align::bottom_right);
    if (aligns.empty()) aligns.push_back(Align::top_left);
    Structure s;
    s.causal = has(ATTNCHECK_FEATURE_CAUSAL) && (spec.require_causal || coin());
    s.window = has(ATTNCHECK_FEATURE_WINDOW) && (spec.require_window || coin());
    s.align = (s.causal || s.window)
                  ? aligns[static_cast<size_t>(pick(static_cast<int64_t>(aligns.size())))]
                  : aligns.front();
    if (s.window) {
      s.left = pick(tk + 1) - 1;
      s.right = pick(tk + 1) - 1;
    }
    return s;
  });
  // Bottom-right causal leaves the first tq - tk queries without keys.
  if (st.causal && st.align == Align::bottom_right) n.tq = std::min(n.tq, n.tk);

  Problem p = Problem::zeros(spec.dtype, n.batch, n.heads, n.kv_heads, n.tq, n.tk, n.dk, n.dv);
  p.causal = st.causal;
  p.align = st.align;
  p.window_left = st.left;
  p.window_right = st.right;
  p.key_valid = part([has, size = n.batch * n.tk] {
    std::vector<uint8_t> kv;
    if (has(ATTNCHECK_FEATURE_KEY_VALID) && coin()) {
      kv.resize(static_cast<size_t>(size));
      for (uint8_t& x : kv) x = mostly_allowed();
    }
    return kv;
  });
  p.mask = part([has, shape = p] () -> std::optional<Broadcast<uint8_t>> {
    if (!has(ATTNCHECK_FEATURE_MASK) || !coin()) return std::nullopt;
    return broadcast<uint8_t>(shape, mostly_allowed);
  });
  p.bias = part([has, shape = p, dtype = spec.dtype]() -> std::optional<Broadcast<double>> {
    if (!has(ATTNCHECK_FEATURE_BIAS) || !coin()) return std::nullopt;
    return broadcast<double>(shape, [dtype] { return round_to(dtype, std::ldexp(small_int(16), -3)); });
  });
  if (has(ATTNCHECK_FEATURE_SOFTCAP)) {
    const double caps[] = {0.0, 1.0, 5.0, 30.0};
    p.softcap = caps[pick(4)];
  }
  if (has(ATTNCHECK_FEATURE_SCALE)) {
    const double scales[] = {p.scale, 1.0, 0.5, 0.125, 2.0};
    p.scale = scales[pick(5)];
  }
  const auto layout = static_cast<Layout>(has(ATTNCHECK_FEATURE_STRIDES) ? pick(3) : 0);
  // Safe limits: |s| <= dk (3 2^e)^2 stays 4x below 0.01 / u (SPEC 4's
  // first-order limit) for q and k; tk values of 3 2^e sum below the
  // largest finite value for v.
  // Scores stored in a coarser format (s_cast) err by 3 u_s |s| (SPEC 4):
  // the same limit with u_s, and the large regime (scores up to ~1e5, made
  // for float scores) capped by it too.
  const double u_scores = std::max(unit_roundoff(spec.dtype),
                                   spec.score_storage ? unit_roundoff(*spec.score_storage) : 0.0);
  const double first_order = std::log2(0.01 / u_scores);
  const int qk_huge = static_cast<int>(std::floor(
      (first_order - 2 - std::log2(9.0 * static_cast<double>(n.dk))) / 2));
  const int qk_large = spec.score_storage ? qk_huge : 6;
  // Input formats narrower than the output's (fp8) cap the large regime at
  // what they hold: small integers up to 3 times 2^e stay below their
  // largest finite value (448 for E4M3: e <= 6); values() caps the huge
  // one the same way, and its fp8 edges reach the format's top.
  const auto fits = [](DType d, int e) { return std::min(e, std::ilogb(max_finite(d)) - 2); };
  const int v_huge = std::ilogb(max_finite(spec.dtype)) - 3 - std::ilogb(static_cast<double>(n.tk));
  const auto tensor = [](int64_t size, DType dtype, int huge, int large) {
    return part([=] { return values(size, dtype, huge, large); });
  };
  p.q = lay_out(tensor(n.batch * n.heads * n.tq * n.dk, formats.q, qk_huge,
                       fits(formats.q, qk_large)),
                {n.batch, n.heads, n.tq, n.dk}, layout);
  if (blocks) {
    const auto block_tensor = [&](int64_t size, int huge) {
      return part([=, d = formats.kv] { return block_values(size, d, 3 * std::ldexp(1.0, huge)); });
    };
    p.k = lay_out(block_tensor(n.batch * n.kv_heads * n.tk * n.dk, qk_huge),
                  {n.batch, n.kv_heads, n.tk, n.dk}, layout, kBlockValues);
    p.v = lay_out(block_tensor(n.batch * n.kv_heads * n.tk * n.dv, v_huge),
                  {n.batch, n.kv_heads, n.tk, n.dv}, layout, kBlockValues);
  } else {
    p.k = lay_out(tensor(n.batch * n.kv_heads * n.tk * n.dk, formats.kv, qk_huge,
                         fits(formats.kv, qk_large)),
                  {n.batch, n.kv_heads, n.tk, n.dk}, layout);
    p.v = lay_out(tensor(n.batch * n.kv_heads * n.tk * n.dv, formats.kv, v_huge,
                         fits(formats.kv, 6)),
                  {n.batch, n.kv_heads, n.tk, n.dv}, layout);
  }
  if (formats.q != spec.dtype) p.q_dtype = formats.q;
  if (formats.kv != spec.dtype) p.kv_dtype = formats.kv;
  if (coverage) {
    ++coverage->problems;
    if (!st.causal && !st.window && p.key_valid.empty() && !p.mask) count("constraints none");
    if (!p.key_valid.empty()) count("constraints key_padding");
    if (p.mask) count("constraints mask");
    if (st.causal) {
      count(st.align == Align::top_left ? "constraints causal_top_left"
                                        : "constraints causal_bottom_right");
    }
    if (st.window) count("constraints window");
    if (p.bias) count("bias");
    if (p.softcap > 0) count("softcap");
    if (layout != Layout::contiguous) count("strided");
    if (n.kv_heads != n.heads) count("gqa");
    if (n.tq != n.tk) count("tq != tk");
    if (n.tq == 1) count("tq = 1");
    if (n.batch != n.heads) count("batch != heads");
  }
  repair_empty_rows(p);
  return p;
}

// ---- Serving parts (SPEC 1.1) ----

// What a serving draw adds to the dense problem, drawn first as one
// ingredient so that shrinking it (towards no sink, dense layout, no
// descale, the first combination) keeps the later draws in place.
struct ServingPlan {
  bool sink = false, descale = false, packed_q = false, packed_k = false, paged = false;
  size_t combo = 0;  // index into spec.combos
};

// Whether the spec allows the version 2 part `bit`, and whether every
// problem must have it.
bool may_have(const GenSpec& spec, Features bit) { return (spec.v2 & spec.features & bit) != 0; }
bool must_have(const GenSpec& spec, Features bit) {
  return may_have(spec, bit) && (spec.v2_required & bit) != 0;
}

// The layouts a problem may take, simplest first: dense, packed (queries
// and keys, or queries only), paged (dense or packed queries). Keys are
// paged or packed, not both.
std::vector<ServingPlan> layout_choices(const GenSpec& spec) {
  const auto may = [&](Features bit) { return may_have(spec, bit); };
  const auto must = [&](Features bit) { return must_have(spec, bit); };
  std::vector<ServingPlan> layouts;
  const auto layout = [&](bool packed_q, bool packed_k, bool paged) {
    ServingPlan l;
    l.packed_q = packed_q;
    l.packed_k = packed_k;
    l.paged = paged;
    layouts.push_back(l);
  };
  if (!must(ATTNCHECK_FEATURE_PACKED) && !must(ATTNCHECK_FEATURE_PAGED_KV)) layout(false, false, false);
  if (may(ATTNCHECK_FEATURE_PACKED) && !must(ATTNCHECK_FEATURE_PAGED_KV)) {
    layout(true, true, false);
    layout(true, false, false);
  }
  if (may(ATTNCHECK_FEATURE_PAGED_KV)) {
    if (!must(ATTNCHECK_FEATURE_PACKED)) layout(false, false, true);
    if (may(ATTNCHECK_FEATURE_PACKED)) layout(true, false, true);
  }
  if (layouts.empty()) layout(false, false, false);
  return layouts;
}

// `plan` with the layout of `l`.
ServingPlan with_layout_of(ServingPlan plan, const ServingPlan& l) {
  plan.packed_q = l.packed_q;
  plan.packed_k = l.packed_k;
  plan.paged = l.paged;
  return plan;
}

ServingPlan draw_plan(const GenSpec& spec, bool any_combo) {
  return part([spec, any_combo] {
    ServingPlan plan;
    if (any_combo) {
      plan.combo = static_cast<size_t>(pick(static_cast<int64_t>(spec.combos.size())));
    }
    plan.sink = must_have(spec, ATTNCHECK_FEATURE_SINK) ||
                (may_have(spec, ATTNCHECK_FEATURE_SINK) && coin());
    plan.descale = must_have(spec, ATTNCHECK_FEATURE_DESCALE) ||
                   (may_have(spec, ATTNCHECK_FEATURE_DESCALE) && coin());
    const std::vector<ServingPlan> layouts = layout_choices(spec);
    return with_layout_of(plan, layouts[static_cast<size_t>(pick(static_cast<int64_t>(layouts.size())))]);
  });
}

// Descales: powers of two and not (a descale whose product with a stored
// value is not a double is the case the oracle must keep apart). q and k
// stay at most 1 so scores stay inside the generator's first-order limit.
Descales draw_descales() {
  return part([] {
    const double qk[] = {1.0, 0.5, 0.375, 0.25, 0.1, 1.0 / 448, 0.0625};
    const double v[] = {1.0, 2.0, 0.5, 1.5, 0.1, 3.0, 1.0 / 448};
    return Descales{qk[pick(7)], qk[pick(7)], v[pick(7)]};
  });
}

// Per-head sinks from the regimes: small integers, a dyadic grid, a sink
// that dominates its rows (above every score by 2^2 to 2^5: weights of the
// real keys down to e^-32), one far below (no influence), and zero.
// Representable in the output format, which is the bias format
// (SinkIsAKeyWithoutValue adds it as a bias).
std::vector<double> draw_sinks(const Problem& p, bool counted) {
  double top = 0;  // a bound on |score| from the largest stored values
  {
    double mq = 0, mk = 0;
    for (double x : p.q.data) mq = std::max(mq, std::fabs(x));
    for (double x : p.k.data) mk = std::max(mk, std::fabs(x));
    const Descales d = p.descale.value_or(Descales{});
    top = std::fabs(p.scale) * d.q * d.k * mq * mk * static_cast<double>(p.dk);
  }
  return part([heads = p.heads, top, dtype = p.dtype, counted] {
    std::vector<double> sink(static_cast<size_t>(heads));
    const int regime = static_cast<int>(pick(5));
    if (counted) count(std::string("sink ") + (regime == 0   ? "small_int"
                                  : regime == 1 ? "dyadic"
                                  : regime == 2 ? "dominating"
                                  : regime == 3 ? "far below"
                                                : "zero"));
    for (double& x : sink) {
      switch (regime) {
        case 0: x = small_int(3); break;
        case 1: x = std::ldexp(small_int(64), -4); break;
        case 2: x = std::min(top + std::ldexp(1.0, 2 + static_cast<int>(pick(4))), 60.0); break;
        case 3: x = -std::min(top + 40.0, 600.0); break;
        default: x = 0; break;
      }
      x = round_to(dtype, x);
    }
    return sink;
  });
}

// Key j of K/V head g of batch entry b of a dense tensor, copied to `at`.
void copy_key(Tensor& to, const Tensor& from_t, size_t at, int64_t b, int64_t g, int64_t j,
              int64_t width) {
  for (int64_t c = 0; c < width; ++c) {
    to.data[at + static_cast<size_t>(c)] = from_t.at(b, g, j, c);
  }
}

// Makes the dense problem d varlen: per-sequence lengths (0 and 1 among
// them, the longest kept as tq / tk), packed rows and / or pages. Junk
// fills what no sequence reads (a page's tail, unused pages): values of
// the keys' format that PagedEqualsContiguous later makes large.
// A window, or bottom-right causal over a sequence with fewer keys than
// queries, may leave a short sequence's rows without keys: without a sink,
// unbind the window, then the causal mask (as repair_empty_rows does for
// dense problems).
void unbind_empty_rows(Problem& p) {
  if (!p.sink.empty()) return;
  const auto empty_row = [&] {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seq_tq(b); ++i)
        if (p.key_band(b, i).empty()) return true;
    return false;
  };
  if (empty_row()) p.window_left = p.window_right = -1;
  if (empty_row()) p.causal = false;
}

// A sequence length in [lo, n] at real sizes: n itself, one of the grid's
// lengths that straddle a tile (2^k - 1, 2^k + 1) or any length.
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
    default: return *rc::gen::resize(100, inRange<int64_t>(lo, n + 1));
  }
}

// `at_size`: the real-size phase (SPEC 3): lengths from real_size_length,
// pages of 16, 256 (the sizes serving caches use) and 17 (odd).
Problem make_varlen(const Problem& d, const ServingPlan& plan, bool sink, bool at_size = false) {
  struct Lengths {
    std::vector<int64_t> q, k;
    int64_t page_size = 1;
    std::vector<int64_t> page_order;  // a permutation of the pages
    std::vector<int64_t> share;       // per sequence: share sequence 0's first page (1) or not
    int64_t spare_pages = 0;
    int64_t table_pad = 0;  // block-table entries past the longest sequence's
  };
  const bool bottom_right_causal = d.causal && d.align == Align::bottom_right;
  // The part captures the dims, not d: RapidCheck copies a part's callable
  // several times (each shrink keeps one), and a copy of d at real sizes is
  // tens of megabytes.
  Lengths len = part([plan, sink, at_size, batch = d.batch, tq = d.tq, tk = d.tk] {
    Lengths l;
    // The page size first: a search that changes the number of sequences
    // keeps it.
    if (plan.paged) {
      const int64_t small[] = {1, 2, 3, 16}, real[] = {16, 256, 17};
      l.page_size = at_size ? real[pick(3)] : small[pick(4)];
      l.spare_pages = pick(3);
      // Serving block tables are sized for the model's longest sequence,
      // not this batch's: a kernel that takes the row stride from the
      // lengths reads the wrong row.
      const int64_t pads[] = {0, 1, 3, 61};
      l.table_pad = pads[pick(4)];
    }
    const auto length = [at_size](int64_t lo, int64_t n) {
      return at_size ? real_size_length(lo, n) : *inRange<int64_t>(lo, n + 1);
    };
    for (int64_t b = 0; b < batch; ++b) {
      // At real sizes the first sequence is the longest (past the split
      // thresholds of the shape) and the others are shorter beside it, as
      // in a serving batch: a kernel that reads max_seqlen_k keys for every
      // sequence shows. Their lengths up to a quarter keep the batch's
      // cost near the shape's.
      const bool longest = at_size && b == 0;
      const auto n_of = [&](int64_t n) { return at_size ? std::max<int64_t>(1, n / 4) : n; };
      l.q.push_back(!plan.packed_q ? tq : longest ? tq : length(0, n_of(tq)));
      // No key at all only with a sink (the row then holds only the sink).
      const int64_t lo = sink ? 0 : 1;
      l.k.push_back(!(plan.packed_k || plan.paged) ? tk : longest ? tk : length(lo, n_of(tk)));
    }
    if (plan.paged) {
      for (int64_t b = 0; b < batch; ++b) l.share.push_back(b > 0 && coin() ? 1 : 0);
    }
    return l;
  });
  // Bottom-right causal with more queries than keys empties rows: only a
  // sink keeps them judgeable.
  for (int64_t b = 0; b < d.batch; ++b) {
    if (bottom_right_causal && !sink) len.q[static_cast<size_t>(b)] =
        std::min(len.q[static_cast<size_t>(b)], len.k[static_cast<size_t>(b)]);
  }
  // Some sequence has queries, and some key (tk >= 1); the longest
  // lengths are tq / tk.
  if (*std::max_element(len.k.begin(), len.k.end()) == 0) len.k[0] = 1;
  if (*std::max_element(len.q.begin(), len.q.end()) == 0) {
    len.q[0] = bottom_right_causal && !sink ? std::min(d.tq, len.k[0]) : d.tq;
  }
  Problem p = d;
  p.tq = *std::max_element(len.q.begin(), len.q.end());
  p.tk = *std::max_element(len.k.begin(), len.k.end());
  p.packed.reset();
  p.paged.reset();
  p.key_valid.clear();
  p.mask.reset();
  p.bias.reset();
  const auto cumulative = [](const std::vector<int64_t>& n) {
    std::vector<int64_t> cu{0};
    for (int64_t x : n) cu.push_back(cu.back() + x);
    return cu;
  };
  if (plan.packed_q || plan.packed_k) p.packed.emplace();
  if (plan.packed_q) {
    p.packed->cu_seqlens_q = cumulative(len.q);
    const int64_t rows = p.packed->cu_seqlens_q.back();
    p.q = make_tensor(1, rows, p.heads, p.dk);
    p.q.strides = {0, p.dk, p.heads * p.dk, 1};
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < len.q[static_cast<size_t>(b)]; ++i)
          for (int64_t c = 0; c < p.dk; ++c) p.q.data[p.q_offset(b, h, i, c)] = d.q.at(b, h, i, c);
  } else {
    p.q = make_tensor(p.batch, p.heads, p.tq, p.dk);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t c = 0; c < p.dk; ++c) p.q.at(b, h, i, c) = d.q.at(b, h, i, c);
  }
  const DType kv_format = d.kv_dtype.value_or(d.dtype);
  if (plan.packed_k) {
    p.packed->cu_seqlens_k = cumulative(len.k);
    const int64_t rows = p.packed->cu_seqlens_k.back();
    for (auto [t, from, width] : {std::tuple{&p.k, &d.k, p.dk}, std::tuple{&p.v, &d.v, p.dv}}) {
      *t = make_tensor(1, std::max<int64_t>(rows, 1), p.kv_heads, width);
      t->strides = {0, width, p.kv_heads * width, 1};
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t g = 0; g < p.kv_heads; ++g)
          for (int64_t j = 0; j < len.k[static_cast<size_t>(b)]; ++j)
            copy_key(*t, *from, p.kv_offset(*t, b, g, j, 0), b, g, j, width);
    }
  } else if (plan.paged) {
    PagedKv pg;
    pg.page_size = len.page_size;
    pg.seqlens_k = len.k;
    pg.block_table_stride = (p.tk + pg.page_size - 1) / pg.page_size + len.table_pad;
    // Pages in order of need; sequence b > 0 may share sequence 0's first
    // page (prefix caching): its first keys are then sequence 0's.
    std::vector<std::vector<int64_t>> pages(static_cast<size_t>(p.batch));
    int64_t next = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n = (len.k[static_cast<size_t>(b)] + pg.page_size - 1) / pg.page_size;
      for (int64_t s = 0; s < n; ++s) {
        const bool shared = s == 0 && len.share[static_cast<size_t>(b)] && !pages[0].empty();
        pages[static_cast<size_t>(b)].push_back(shared ? pages[0][0] : next++);
      }
    }
    pg.num_pages = next + len.spare_pages;
    if (pg.num_pages == 0) pg.num_pages = 1;
    // Shuffle the physical page numbers.
    const std::vector<int64_t> perm = part([n = pg.num_pages] { return permutation(n); });
    pg.block_table.assign(static_cast<size_t>(p.batch * pg.block_table_stride), pg.num_pages - 1);
    for (int64_t b = 0; b < p.batch; ++b)
      for (size_t s = 0; s < pages[static_cast<size_t>(b)].size(); ++s)
        pg.block_table[static_cast<size_t>(b * pg.block_table_stride) + s] =
            perm[static_cast<size_t>(pages[static_cast<size_t>(b)][s])];
    p.paged = pg;
    // Junk everywhere first (slots no sequence reads keep it), then the keys.
    for (auto [t, from, width] : {std::tuple{&p.k, &d.k, p.dk}, std::tuple{&p.v, &d.v, p.dv}}) {
      *t = make_tensor(pg.num_pages, p.kv_heads, pg.page_size, width);
      if (at_size) {
        // One drawn seed and a hash per slot (as draw_sized's values): a
        // draw per element would cost a RapidCheck ingredient each, seconds
        // for a pool of millions of slots.
        const uint64_t seed = *rc::gen::resize(100, rc::gen::arbitrary<uint64_t>());
        for (size_t e = 0; e < t->data.size(); ++e) {
          // Small integers: exact in every format, block formats included
          // (a block of them has scale 1).
          t->data[e] = stored(kv_format, static_cast<double>(hash(seed, 19, e, 0, 0, 0) % 7) - 3);
        }
      } else {
        t->data = part([n = t->data.size(), kv_format] {
          std::vector<double> x(n);
          for (double& e : x) e = stored(kv_format, small_int(3));
          return x;
        });
      }
      for (int64_t b = 0; b < p.batch; ++b) {
        const bool shares = b > 0 && !pages[0].empty() &&
                            !pages[static_cast<size_t>(b)].empty() &&
                            pages[static_cast<size_t>(b)][0] == pages[0][0];
        for (int64_t g = 0; g < p.kv_heads; ++g)
          for (int64_t j = 0; j < len.k[static_cast<size_t>(b)]; ++j) {
            // A slot of the shared page that sequence 0 filled keeps its
            // keys: sequence b reads them as its own first keys.
            if (shares && j < pg.page_size && j < len.k[0]) continue;
            copy_key(*t, *from, p.kv_offset(*t, b, g, j, 0), b, g, j, width);
          }
      }
    }
  } else {
    Problem c = d.contiguous();
    p.k = std::move(c.k);
    p.v = std::move(c.v);
  }
  if (!d.dout.empty()) p.dout.clear();
  return p;
}

// SPEC 1.1's table: no key_valid, mask or bias with packed or paged.
GenSpec without_varlen_exclusions(GenSpec spec) {
  spec.features &= ~(ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK |
                     ATTNCHECK_FEATURE_BIAS | ATTNCHECK_FEATURE_STRIDES);
  return spec;
}

bool varlen(const ServingPlan& plan) { return plan.packed_q || plan.packed_k || plan.paged; }

// The version 2 parts of a real-size draw (SPEC 3: every declared format
// combination, sinks, descales, packed and paged layouts), read from the
// shape's variant instead of drawn: the real-size phase numbers its
// shapes, so one run's shapes take the declared combinations, sinks (odd
// variants), descales (variants 1 and 2 mod 4) and layouts (every third
// variant moves to the next) in turn, and the size search, which keeps the
// variant, keeps them while it shrinks the shape.
ServingPlan size_plan(const GenSpec& spec, bool any_combo) {
  const auto k = static_cast<size_t>(spec.size->variant);
  ServingPlan plan;
  if (any_combo) plan.combo = k % spec.combos.size();
  plan.sink = must_have(spec, ATTNCHECK_FEATURE_SINK) ||
              (may_have(spec, ATTNCHECK_FEATURE_SINK) && k % 2 == 1);
  plan.descale = must_have(spec, ATTNCHECK_FEATURE_DESCALE) ||
                 (may_have(spec, ATTNCHECK_FEATURE_DESCALE) && (k % 4 == 1 || k % 4 == 2));
  const std::vector<ServingPlan> layouts = layout_choices(spec);
  return with_layout_of(plan, layouts[(k / 3) % layouts.size()]);
}

// A real-size shape cut into 5 to 16 sequences (SPEC 3: batches past the
// 4 a kernel may stage; s.sequences once the size search has shrunk
// them), the cost kept near the shape's: fewer K/V heads
// (the group kept), then fewer queries. make_varlen gives the sequences
// after the first at most a quarter of its lengths.
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

Problem draw_problem(const GenSpec& spec) {
  // Version 1 problems unless the property takes version 2 problems, or
  // the implementation declares no combination with q = kv = out: then
  // every problem is in one of its combinations (SPEC 5.1: the harness
  // never hands it another). A property that takes version 2 problems
  // draws the declared mixed combinations even where the implementation
  // declares no version 2 feature (v2 = 0): a kernel of f32 and bf16 K/V
  // alone was checked in f32 only.
  const DTypeCombo uniform{spec.dtype, spec.dtype, spec.dtype};
  const bool uniform_ok = spec.combos.empty() ||
                          std::find(spec.combos.begin(), spec.combos.end(), uniform) != spec.combos.end();
  const bool mixed = std::any_of(spec.combos.begin(), spec.combos.end(),
                                 [&](const DTypeCombo& c) { return c != uniform; });
  const bool any_combo =
      !spec.combos.empty() && (spec.v2 != 0 || !uniform_ok || (spec.v2_problems && mixed));
  if (!spec.size && spec.v2 == 0 && uniform_ok && !any_combo) {
    return draw_dense(spec, uniform, spec.max_bh);
  }
  const ServingPlan plan = spec.size ? size_plan(spec, any_combo) : draw_plan(spec, any_combo);
  const DTypeCombo formats = any_combo ? spec.combos[plan.combo] : uniform;
  GenSpec dense = varlen(plan) ? without_varlen_exclusions(spec) : spec;
  if (spec.size && varlen(plan)) dense.size = as_sequences(*spec.size);
  Problem d = draw_dense(dense, formats, varlen(plan) ? spec.max_sequences : spec.max_bh);
  // Descales and sinks are drawn whether used or not, so that shrinking the
  // plan (dropping a sink, a descale) keeps every later draw in place.
  const Descales descales = draw_descales();
  if (plan.descale) d.descale = descales;
  const std::vector<double> sinks = draw_sinks(d, plan.sink);
  // Rows whose keys are all disallowed: with a sink they hold only it.
  const bool empty_batch = part([] {
    return *rc::gen::resize(100, rc::gen::weightedElement<bool>({{3, false}, {1, true}}));
  });
  if (plan.sink) {
    d.sink = sinks;
    if (empty_batch && !d.key_valid.empty()) std::fill_n(d.key_valid.begin(), d.tk, uint8_t{0});
  }
  if (coverage) {
    if (plan.sink) count("serving sink");
    if (plan.descale) count("serving descale");
    if (plan.packed_q) count(plan.packed_k ? "serving packed" : "serving packed queries");
    if (plan.paged) count("serving paged");
    if (formats.q != spec.dtype || formats.kv != spec.dtype) count("serving mixed formats");
  }
  if (!varlen(plan)) return d;
  // The real-size phase judges one case, which RapidCheck draws at size
  // 0: its lengths, page shuffle and junk are drawn at full size.
  Problem p = spec.size ? *rc::gen::resize(100, rc::gen::exec([&d, plan] {
    return make_varlen(d, plan, plan.sink, true);
  }))
                        : make_varlen(d, plan, plan.sink);
  unbind_empty_rows(p);
  return p;
}

// A copy of q with new_tq rows, old rows repeated cyclically (nothing drawn).
void resize_queries(Problem& p, int64_t new_tq) {
  Tensor q = make_tensor(p.batch, p.heads, new_tq, p.dk);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < new_tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d) q.at(b, h, i, d) = p.q.at(b, h, i % p.tq, d);
  p.q = std::move(q);
  p.tq = new_tq;
  p.mask.reset();  // both have a tq axis
  p.bias.reset();
}

enum class EmptyBy { key_padding, mask, bottom_right_causal, window };

std::vector<EmptyBy> empty_methods(const GenSpec& spec) {
  const auto has = [&](Features bit) { return (spec.features & bit) == bit; };
  std::vector<EmptyBy> m;
  if (has(ATTNCHECK_FEATURE_KEY_VALID)) m.push_back(EmptyBy::key_padding);
  if (has(ATTNCHECK_FEATURE_MASK)) m.push_back(EmptyBy::mask);
  if (has(ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT))
    m.push_back(EmptyBy::bottom_right_causal);
  if (has(ATTNCHECK_FEATURE_WINDOW)) m.push_back(EmptyBy::window);
  return m;
}

}  // namespace

CoverageScope::CoverageScope(Coverage& c) { coverage = &c; }
CoverageScope::~CoverageScope() { coverage = nullptr; }

const char* size_regime_name(SizeRegime r) { return kSizeRegimeNames[static_cast<int>(r)]; }

GenSpec spec_for(const ImplInfo& info, DType dtype) {
  GenSpec s;
  s.dtype = dtype;
  s.features = info.features;
  s.limits = info.limits;
  // Scores rounded to a 16-bit format before softmax, by an s_cast or by
  // a 16-bit accumulation (torch's bf16 matmuls): keep them within the
  // first-order analysis of that format, or most large-regime cases are
  // discarded as ill-conditioned.
  // By stage (SPEC 4.1): the q.k sums' format, and a declared softmax
  // format coarser than the stored scores', which reads them.
  const PrecisionTraits& pt = info.precision;
  DType storage = pt.s_cast_format();
  if (pt.softmax_accum && unit_roundoff(*pt.softmax_accum) > unit_roundoff(storage))
    storage = *pt.softmax_accum;
  if (storage != pt.score_format() || unit_roundoff(pt.score_format()) > unit_roundoff(DType::f32)) {
    s.score_storage = storage;
  }
  // Q rounded to Q8_0 before q.k (q_cast, SPEC 4.1) errs by up to half its
  // block's scale, max |q| / 254 per element: about bf16's unit roundoff
  // (2^-8) of the largest |q|, so scores keep to bf16's first-order range,
  // or most cases are discarded as ill-conditioned.
  for (const DTypeCombo& c : info.combos) {
    const std::optional<DType> q_cast = pt.q_cast_format(c.kv);
    if (q_cast && is_block_format(*q_cast) &&
        (!s.score_storage || unit_roundoff(*s.score_storage) < unit_roundoff(DType::bf16)))
      s.score_storage = DType::bf16;
  }
  for (const DTypeCombo& c : info.combos) {
    if (c.out == dtype) s.combos.push_back(c);
  }
  s.pv_range = max_finite(pt.pv_format());
  for (const ImplPath& path : info.paths)
    s.pv_range = std::min(s.pv_range, max_finite(path.precision.pv_format()));
  return s;
}

GenSpec spec_for(const ImplInfo& info, DType dtype, Profile profile) {
  GenSpec s = spec_for(info, dtype);
  if (profile == Profile::thorough) {  // past the usual block sizes of 4, 8 and 16
    s.max_t = 19;
    s.max_d = 9;
    s.max_bh = 4;
  }
  return s;
}

namespace {

// relayout with a padded layout's gaps in units of `pad` (lay_out).
Tensor relayout_by(const Tensor& t, std::array<int64_t, 4> shape, Layout layout, int64_t pad) {
  std::vector<double> x;
  x.reserve(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d) x.push_back(t.at(a, b, c, d));
  return lay_out(x, shape, layout, pad);
}

}  // namespace

Tensor relayout(const Tensor& t, std::array<int64_t, 4> shape, Layout layout) {
  return relayout_by(t, shape, layout, 1);
}

Problem with_layout(const Problem& p, Layout layout) {
  Problem c = p;
  // Block formats pad by whole blocks (SPEC 1.2).
  const int64_t pad = is_block_format(p.kv_dtype.value_or(p.dtype)) ? kBlockValues : 1;
  c.q = relayout(p.q, {p.batch, p.heads, p.tq, p.dk}, layout);
  c.k = relayout_by(p.k, {p.batch, p.kv_heads, p.tk, p.dk}, layout, pad);
  c.v = relayout_by(p.v, {p.batch, p.kv_heads, p.tk, p.dv}, layout, pad);
  return c;
}

rc::Gen<Problem> problem(const GenSpec& spec) {
  return rc::gen::exec([spec] { return draw_problem(spec); });
}

// Position i swaps with i + r, r shrinking to 0.
std::vector<int64_t> permutation(int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t r = *rc::gen::inRange<int64_t>(0, n - i);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(i + r)]);
  }
  return perm;
}

bool can_make_empty_rows(const GenSpec& spec) { return !empty_methods(spec).empty(); }

rc::Gen<Problem> problem_with_empty_row(const GenSpec& spec) {
  return rc::gen::exec([spec] {
    Problem p = draw_problem(spec);
    const auto methods = empty_methods(spec);
    const EmptyBy by = methods[static_cast<size_t>(pick(static_cast<int64_t>(methods.size())))];
    switch (by) {
      case EmptyBy::key_padding: {
        if (p.key_valid.empty()) p.key_valid.assign(static_cast<size_t>(p.batch * p.tk), 1);
        const int64_t b = pick(p.batch);
        std::fill_n(p.key_valid.begin() + b * p.tk, p.tk, uint8_t{0});
        break;
      }
      case EmptyBy::mask: {
        if (!p.mask) {
          p.mask = Broadcast<uint8_t>{1, 1, std::vector<uint8_t>(static_cast<size_t>(p.tq * p.tk), 1)};
        }
        const int64_t b = pick(p.batch), h = pick(p.heads), i = pick(p.tq);
        for (int64_t j = 0; j < p.tk; ++j) p.mask->at(b, h, i, j, p.tq, p.tk) = 0;
        break;
      }
      case EmptyBy::bottom_right_causal:
        resize_queries(p, p.tk + 1 + pick(2));
        p.causal = true;
        p.align = Align::bottom_right;
        break;
      case EmptyBy::window:
        // A zero-width window with tq > tk.
        resize_queries(p, p.tk + 1 + pick(2));
        p.causal = false;
        // Either alignment works: top-left leaves i >= tk empty, bottom-right
        // leaves i < tq - tk empty.
        p.align = (spec.features & ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT) &&
                          !(spec.features & ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)
                      ? Align::bottom_right
                      : Align::top_left;
        p.window_left = 0;
        p.window_right = 0;
        break;
    }
    return p;
  });
}

}  // namespace attncheck::gen
