#include "attncheck/generators.h"
#include "properties/seeds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

#include <fmt/format.h>

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

constexpr const char* kRegimeNames[] = {"small_int", "dyadic",    "normal",    "large",
                                        "huge",      "one_hot",   "all_equal", "near_tied"};

// Values of one tensor from one regime. `huge_exponent` is the tensor's own
// safe limit: for q and k the largest power of two that keeps scores within
// the first-order analysis, for v the largest that keeps sums of tk values
// finite. `large_exponent` caps the large regime the same way where scores
// are stored in a coarse format.
std::vector<double> values(int64_t n, DType dtype, int huge_exponent, int large_exponent) {
  const auto regime = static_cast<Regime>(pick(8));
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
    case Regime::huge:  // small integers times 2^huge_exponent, shrinking down
      for (double& e : x) e = std::ldexp(small_int(3), huge_exponent - static_cast<int>(pick(4)));
      break;
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
  }
  for (double& e : x) e = round_to(dtype, e);
  return x;
}

Tensor lay_out(const std::vector<double>& x, std::array<int64_t, 4> shape, Layout layout) {
  const auto [d0, d1, d2, d3] = shape;
  Tensor t;
  if (layout == Layout::bthd) {
    t.strides = {d2 * d1 * d3, d3, d1 * d3, 1};
  } else if (layout == Layout::padded) {
    const int64_t s2 = d3 + 1, s1 = d2 * s2 + 2, s0 = d1 * s1 + 3;
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
uint64_t hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  uint64_t x = seed;
  for (uint64_t y : {a, b, c, d, e}) {
    x ^= y + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2);
    x = mix(x);
  }
  return x;
}

// Regimes at real sizes: those of real data (small integers, a uniform
// grid, near-normal) and, for v, large values. Huge and one-hot regimes
// stay with the small problems, where shrinking explains them.
double seeded_value(Regime regime, uint64_t h, int large_exponent) {
  const auto uniform = [](uint64_t x) { return static_cast<int>(x % 129) - 64; };  // [-64, 64]
  switch (regime) {
    case Regime::small_int: return static_cast<int>(h % 7) - 3;
    case Regime::dyadic: return std::ldexp(uniform(h), -6);
    case Regime::large: return std::ldexp(static_cast<int>(h % 7) - 3, large_exponent);
    default: {  // normal: four uniforms
      int s = 0;
      for (int r = 0; r < 4; ++r) s += uniform(h >> (16 * r));
      return std::ldexp(s, -6);
    }
  }
}

// A problem of exactly spec.size's shape (within the features and the
// require_* of the spec), its values a function of one drawn seed and
// each element's position.
Problem draw_sized(const GenSpec& spec) {
  SizeShape s = *spec.size;
  const auto has = [&](Features bit) { return (spec.features & bit) != 0; };
  const uint64_t seed = *rc::gen::resize(100, rc::gen::arbitrary<uint64_t>());
  if (spec.require_gqa && s.kv_heads == s.heads) {
    if (s.heads == 1) s.heads = 2;
    s.kv_heads = std::max<int64_t>(1, s.heads / 2);
    while (s.heads % s.kv_heads) --s.kv_heads;
  }
  if (spec.require_causal) s.causal = true;
  Problem p = Problem::zeros(spec.dtype, s.batch, s.heads, s.kv_heads, s.tq, s.tk, s.dk, s.dv);
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
  const int v_large = std::min(6, std::ilogb(max_finite(spec.dtype)) - 3 - std::ilogb(static_cast<double>(s.tk)));
  constexpr Regime kQkRegimes[] = {Regime::normal, Regime::dyadic, Regime::small_int};
  constexpr Regime kVRegimes[] = {Regime::normal, Regime::dyadic, Regime::small_int, Regime::large};
  const auto fill = [&](Tensor& t, uint64_t id, int64_t heads, int64_t rows, int64_t cols, bool is_v) {
    const uint64_t r = hash(seed, id, 99, 0, 0, 0);
    const Regime regime = is_v ? kVRegimes[r % 4] : kQkRegimes[r % 3];
    count(std::string("regime ") + kRegimeNames[static_cast<int>(regime)]);
    const int large = is_v ? v_large : std::min(qk_large, 3);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t c = 0; c < cols; ++c) {
            const uint64_t x = hash(seed, id, static_cast<uint64_t>(b), static_cast<uint64_t>(h),
                                    static_cast<uint64_t>(i), static_cast<uint64_t>(c));
            t.at(b, h, i, c) = round_to(spec.dtype, seeded_value(regime, x, large));
          }
  };
  fill(p.q, 1, s.heads, s.tq, s.dk, false);
  fill(p.k, 2, s.kv_heads, s.tk, s.dk, false);
  fill(p.v, 3, s.kv_heads, s.tk, s.dv, true);
  if (coverage) {
    ++coverage->problems;
    count("real size");
  }
  repair_empty_rows(p);
  return p;
}

Problem draw_problem(const GenSpec& spec) {
  if (spec.size) return draw_sized(spec);
  const Features f = spec.features;
  const auto has = [f](Features bit) { return (f & bit) != 0; };

  Dims n = part([spec, has] {
    const Limits& lim = spec.limits;
    Dims d{};
    d.batch = *inRange<int64_t>(1, spec.max_bh + 1);
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
  const int v_huge = std::ilogb(max_finite(spec.dtype)) - 3 - std::ilogb(static_cast<double>(n.tk));
  const auto tensor = [dtype = spec.dtype](int64_t size, int huge, int large) {
    return part([=] { return values(size, dtype, huge, large); });
  };
  p.q = lay_out(tensor(n.batch * n.heads * n.tq * n.dk, qk_huge, qk_large), {n.batch, n.heads, n.tq, n.dk}, layout);
  p.k = lay_out(tensor(n.batch * n.kv_heads * n.tk * n.dk, qk_huge, qk_large), {n.batch, n.kv_heads, n.tk, n.dk}, layout);
  p.v = lay_out(tensor(n.batch * n.kv_heads * n.tk * n.dv, v_huge, 6), {n.batch, n.kv_heads, n.tk, n.dv}, layout);
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

GenSpec spec_for(const ImplInfo& info, DType dtype) {
  GenSpec s;
  s.dtype = dtype;
  s.features = info.features;
  s.limits = info.limits;
  if (info.precision.s_cast_format() != info.precision.accum) {
    s.score_storage = info.precision.s_cast_format();
  }
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

Tensor relayout(const Tensor& t, std::array<int64_t, 4> shape, Layout layout) {
  std::vector<double> x;
  x.reserve(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d) x.push_back(t.at(a, b, c, d));
  return lay_out(x, shape, layout);
}

Problem with_layout(const Problem& p, Layout layout) {
  Problem c = p;
  c.q = relayout(p.q, {p.batch, p.heads, p.tq, p.dk}, layout);
  c.k = relayout(p.k, {p.batch, p.kv_heads, p.tk, p.dk}, layout);
  c.v = relayout(p.v, {p.batch, p.kv_heads, p.tk, p.dv}, layout);
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
