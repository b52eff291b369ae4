// The real-size model of SPEC 3: the fixed shapes of each profile, random
// real-size shapes, the grids the size search walks, and fitting a shape
// to an implementation's limits and a profile's cost cap.

#include "properties/gen/real_size_shapes.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "properties/gen/serving_plans.h"
#include "properties/gen/spec.h"
#include "properties/seeds.h"

namespace attncheck::gen {
namespace {

constexpr const char* kSizeRegimeNames[] = {"plain values", "near-flat scores",
                                            "scores far below 0", "large values",
                                            "one dominant key"};

SizeShape shape(std::string label, int64_t batch, int64_t heads, int64_t kv_heads, int64_t tq,
                int64_t tk, int64_t dk, int64_t dv) {
  SizeShape s;
  s.label = std::move(label);
  s.batch = batch;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.tq = tq;
  s.tk = tk;
  s.dk = dk;
  s.dv = dv;
  return s;
}

SizeShape with_key_padding(SizeShape s) {
  s.key_padding = true;
  return s;
}

SizeShape decode(SizeShape s) {
  s.tq = 1;
  s.key_padding = true;
  return s;
}

SizeShape chunked_prefill(SizeShape s) {
  s.causal = true;
  s.align = Align::bottom_right;
  return s;
}

SizeShape causal(SizeShape s, Align align) {
  s.causal = true;
  s.align = align;
  return s;
}

SizeShape windowed(SizeShape s, int64_t left, int64_t right, Align align) {
  s.window_left = left;
  s.window_right = right;
  s.align = align;
  return s;
}

SizeShape with_mask(SizeShape s) {
  s.explicit_mask = true;
  return s;
}

SizeShape with_bias(SizeShape s) {
  s.bias = true;
  return s;
}

SizeShape with_softcap(SizeShape s, double cap) {
  s.softcap = cap;
  return s;
}

SizeShape with_sink(SizeShape s, bool sink) {
  s.sink = sink ? 1 : 0;
  return s;
}

// The largest allowed head dim <= d (or the smallest allowed one).
int64_t allowed_dim(int64_t d, const Limits& lim) {
  if (lim.dk_max > 0) d = std::min(d, lim.dk_max);
  d = std::max(d, std::max<int64_t>(1, lim.dk_min));
  if (lim.dk_multiple > 1) {
    d = std::max(lim.dk_multiple, d / lim.dk_multiple * lim.dk_multiple);
  }
  return d;
}

}  // namespace

const char* size_regime_name(SizeRegime r) { return kSizeRegimeNames[static_cast<int>(r)]; }

std::string SizeShape::describe() const {
  const std::string structure = fmt::format(
      "{}{}{}{}",
      windowed() ? fmt::format(", window {}/{}{}", window_left, window_right,
                               !causal && align == Align::bottom_right ? " bottom-right" : "")
                 : "",
      explicit_mask ? ", mask" : "", bias ? ", bias" : "",
      softcap > 0 ? fmt::format(", softcap {}", softcap) : "");
  return fmt::format("B {} H {}/{} tq {} tk {} dk {} dv {}{}{}{}{}{}{}", batch, heads, kv_heads, tq,
                     tk, dk, dv, sequences > 0 ? fmt::format(", {} sequences", sequences) : "",
                     causal ? (align == Align::bottom_right ? " causal bottom-right" : " causal")
                            : "",
                     key_padding ? " padded" : "", structure, zero_queries ? ", q = 0" : "",
                     small_values                   ? ", values small integers"
                     : regime != SizeRegime::plain ? fmt::format(", {}", size_regime_name(regime))
                                                    : "");
}

std::vector<int64_t> length_grid() {
  std::vector<int64_t> g;
  for (int64_t n = 1; n <= 16; ++n) g.push_back(n);
  for (int k = 4; k <= 14; ++k) {
    const int64_t p = int64_t{1} << k;
    g.insert(g.end(), {p - 1, p, p + 1});
  }
  std::sort(g.begin(), g.end());
  g.erase(std::unique(g.begin(), g.end()), g.end());
  return g;
}

std::vector<int64_t> head_dim_grid() {
  return {1,  2,  3,  4,  5,  6,   7,   8,   16,  32,  40,  48,  59,
          64, 65, 72, 80, 96, 111, 112, 128, 129, 160, 192, 256};
}

// CI: 2^22 units per case: decode over 4097 keys with 4 heads of 128 and
// GQA 8/2 over 130 keys fit, and a case costs tens of milliseconds (the
// implementation, the enclosure and the tolerances together), so the
// catalog's real-size phase over every built-in stays near a minute on 2
// cores (docs/development-and-ci.md). Thorough: 32 times more (decode over 16385 keys with 8
// heads of 128 fits once batch is 1).
int64_t size_cost_cap(Profile profile) {
  return profile == Profile::thorough ? (int64_t{1} << 27) : (int64_t{1} << 22);
}

// The certified oracle's double-double path costs about 30 times the
// enclosure per score element (measured by oracle_bench: docs/generators-and-sizes.md).
int64_t reference_weight(const ImplInfo& info) {
  return info.precision.accum == DType::f64 ? 32 : 1;
}

SizeShape fit_shape(SizeShape s, const GenSpec& spec, int64_t cap, int64_t weight) {
  const auto has = [&](Features bit) { return (spec.features & bit) != 0; };
  const Limits& lim = spec.limits;
  if (!has(ATTNCHECK_FEATURE_GQA)) s.kv_heads = s.heads;
  if (!has(ATTNCHECK_FEATURE_KEY_VALID)) s.key_padding = false;
  if (s.causal && !has(ATTNCHECK_FEATURE_CAUSAL)) s.causal = false;
  if (!has(ATTNCHECK_FEATURE_WINDOW)) s.window_left = s.window_right = -1;
  if (!has(ATTNCHECK_FEATURE_MASK)) s.explicit_mask = false;
  if (!has(ATTNCHECK_FEATURE_BIAS)) s.bias = false;
  if (!has(ATTNCHECK_FEATURE_SOFTCAP)) s.softcap = 0;
  const bool aligned = s.causal || s.windowed();  // the alignment matters
  if (aligned && s.align == Align::bottom_right && !has(ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT)) {
    s.align = Align::top_left;
  }
  if (aligned && s.align == Align::top_left && !has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)) {
    s.align = Align::bottom_right;
  }
  if (!aligned) s.align = Align::top_left;
  if (lim.max_tq > 0) s.tq = std::min(s.tq, lim.max_tq);
  if (lim.max_tk > 0) s.tk = std::min(s.tk, lim.max_tk);
  s.dk = allowed_dim(s.dk, lim);
  if (lim.dv_equals_dk) s.dv = s.dk;
  if (lim.max_batch_heads > 0) {
    s.batch = std::max<int64_t>(1, std::min(s.batch, lim.max_batch_heads / s.heads));
    while (s.batch * s.heads > lim.max_batch_heads && s.heads > 1) {
      s.heads = std::max<int64_t>(1, s.heads / 2);
      s.kv_heads = std::max<int64_t>(1, std::min(s.kv_heads, s.heads));
      while (s.heads % s.kv_heads) --s.kv_heads;
    }
  }
  // Bottom-right causal with tq > tk leaves the first queries without
  // keys, a window the first (bottom-right) or the last (top-left) ones.
  const auto clamp_tq = [&] {
    if ((s.causal && s.align == Align::bottom_right) || s.windowed()) s.tq = std::min(s.tq, s.tk);
  };
  clamp_tq();
  const auto over = [&] { return s.cost() * weight > cap; };
  // Shrink: batch, tq, heads (keeping the group size), dims, tk last.
  while (over() && s.batch > 1) s.batch = 1;
  while (over() && s.tq > 1) s.tq = std::max<int64_t>(1, s.tq / 2);
  while (over() && s.heads > 1) {
    const int64_t group = s.heads / s.kv_heads;
    if (s.kv_heads > 1) {
      s.kv_heads = std::max<int64_t>(1, s.kv_heads / 2);
      s.heads = s.kv_heads * group;
    } else {
      s.heads = std::max<int64_t>(1, s.heads / 2);
      s.kv_heads = 1;
    }
  }
  while (over() && (s.dk > 1 || s.dv > 1)) {
    const int64_t dk = allowed_dim(std::max<int64_t>(1, s.dk / 2), lim);
    const int64_t dv = lim.dv_equals_dk ? dk : std::max<int64_t>(1, s.dv / 2);
    if (dk == s.dk && dv == s.dv) break;
    s.dk = dk;
    s.dv = dv;
  }
  while (over() && s.tk > 1) {
    s.tk = std::max<int64_t>(1, s.tk / 2);
    clamp_tq();
  }
  return s;
}

std::vector<SizeShape> fixed_real_shapes(Profile profile) {
  std::vector<SizeShape> v = {
      shape("tk 63", 2, 2, 2, 63, 63, 64, 64),
      shape("tk 64, dk 96", 1, 2, 2, 64, 64, 96, 96),
      shape("tk 65, dk 40", 2, 1, 1, 65, 65, 40, 40),
      shape("tk 257, dk 112", 1, 2, 2, 33, 257, 112, 112),
      shape("tk 1025, dk 160", 1, 1, 1, 12, 1025, 160, 160),
      decode(shape("decode, tk 4097, key padding", 1, 8, 2, 1, 4097, 128, 128)),
      shape("dk 59", 1, 2, 2, 65, 129, 59, 59),
      shape("dk 128", 1, 2, 2, 64, 256, 128, 128),
      shape("dk 256", 1, 1, 1, 32, 160, 256, 256),
      shape("dk 192, dv 128", 1, 2, 2, 48, 200, 192, 128),
      shape("GQA 8/2", 2, 8, 2, 32, 130, 64, 64),
      shape("GQA 12/4", 1, 12, 4, 24, 97, 80, 80),
      chunked_prefill(shape("chunked prefill, bottom-right", 1, 2, 2, 64, 1100, 64, 64)),
  };
  if (profile == Profile::thorough) {
    const std::vector<SizeShape> more = {
        shape("tk 127", 2, 2, 2, 127, 127, 64, 64),
        shape("tk 129", 1, 2, 2, 129, 129, 64, 64),
        shape("tk 239", 1, 2, 2, 100, 239, 111, 111),
        shape("tk 799", 2, 2, 2, 64, 799, 80, 80),
        shape("tk 2048", 1, 4, 4, 64, 2048, 64, 64),
        shape("tk 2049", 1, 4, 2, 63, 2049, 96, 96),
        decode(shape("decode, tk 16385, key padding", 2, 8, 1, 1, 16385, 128, 128)),
        shape("dk 32", 2, 4, 4, 128, 128, 32, 32),
        shape("dk 40", 1, 4, 4, 100, 300, 40, 40),
        shape("dk 48", 1, 4, 4, 100, 300, 48, 48),
        shape("dk 72", 1, 4, 4, 100, 300, 72, 72),
        shape("dk 111", 1, 4, 4, 100, 300, 111, 111),
        shape("dk 112", 1, 4, 4, 100, 300, 112, 112),
        shape("dk 160", 1, 4, 4, 100, 300, 160, 160),
        shape("dk 256 long", 1, 2, 2, 256, 1024, 256, 256),
        shape("GQA 8/1", 2, 8, 1, 64, 512, 64, 64),
        shape("GQA 9/3", 2, 9, 3, 64, 300, 64, 64),
        shape("GQA 16/4", 2, 16, 4, 64, 257, 64, 64),
        shape("GQA 32/8", 1, 32, 8, 64, 257, 128, 128),
        shape("GQA 64/8", 1, 64, 8, 32, 129, 64, 64),
        chunked_prefill(shape("chunked prefill, tk 4097", 1, 4, 2, 256, 4097, 128, 128)),
    };
    v.insert(v.end(), more.begin(), more.end());
  }
  return v;
}

// The structural covering set (SPEC 3), every profile: causal over several
// 64-query tiles both ways, windows whose left edges fall inside key blocks
// (100 and 37 keys back: no multiple of 16), an explicit mask with key
// padding, bias at an odd head dim past 64, softcap without any mask over a
// whole query tile (small head dims: it fits every reference's cap) and
// with causal, a mask and bias, and again at dk 64. With the fixed list
// its head dims cover SPEC 3's in every profile: 32, 40 (tk 65), 64, 72,
// 80 (GQA 12/4), 96 (tk 64), 112 (tk 257), 128, 160 (tk 1025), 192, 256
// and the odd 59, 65, 111, 129, each shape under the CI cap (2^22) where
// fitting leaves its queries and keys as listed.
std::vector<SizeShape> structural_real_shapes() {
  return {
      causal(shape("causal top-left, 4 query tiles", 1, 1, 1, 200, 200, 32, 32), Align::top_left),
      causal(shape("causal bottom-right, 3 query tiles, dk 65", 1, 1, 1, 130, 230, 65, 65),
             Align::bottom_right),
      causal(windowed(shape("sliding window 100, causal, dk 72", 1, 1, 1, 150, 150, 72, 72), 100, -1,
                      Align::top_left),
             Align::top_left),
      windowed(shape("window 37/19, bottom-right", 1, 1, 1, 96, 260, 32, 32), 37, 19,
               Align::bottom_right),
      with_mask(with_key_padding(shape("explicit mask, key padding, dk 129", 2, 1, 1, 32, 200, 129, 129))),
      with_bias(shape("bias, dk 111", 1, 1, 1, 96, 150, 111, 111)),
      with_softcap(shape("softcap, no mask, tq 64", 1, 1, 1, 64, 100, 8, 8), 5),
      with_bias(with_mask(with_softcap(
          causal(shape("softcap with causal, mask and bias", 1, 1, 1, 80, 200, 32, 32),
                 Align::bottom_right),
          30))),
      // The same over a head dim kernels vectorise (a multiple of every
      // SIMD width): a tiled path that needs dv in whole vectors (ggml's,
      // docs/ggml.md F4) takes this one, not dk 8.
      with_softcap(shape("softcap, no mask, tq 64, dk 64", 1, 1, 1, 64, 100, 64, 64), 5),
      // Issue 51, what real models run and the CI list missed. A sliding
      // window of 40 keys, bottom-right over 256: every query's band
      // starts past key 150, so a kernel that skips the key blocks before
      // the band skips block 0 (of 16, 64 or 128 keys), with the sink
      // folded into its state and without one.
      with_sink(causal(windowed(shape("sliding window skips key block 0, no sink", 1, 1, 1, 64,
                                      256, 32, 32),
                                40, -1, Align::bottom_right),
                       Align::bottom_right),
                false),
      with_sink(causal(windowed(shape("sliding window skips key block 0, sink", 1, 1, 1, 64, 256,
                                      40, 40),
                                40, -1, Align::bottom_right),
                       Align::bottom_right),
                true),
      // GQA groups of 2, 8 and 16 over two K/V heads (with 12/4's 3 and
      // 8/2's 4 of the fixed list, and every shape's group of 1): a kernel
      // path taken only for big groups is met. Small enough that the
      // certified oracle's cap keeps both K/V heads (one query).
      shape("GQA 4/2", 1, 4, 2, 8, 65, 64, 64),
      shape("GQA 16/2, groups of 8", 1, 16, 2, 8, 63, 32, 32),
      shape("GQA 32/2, groups of 16", 1, 32, 2, 4, 63, 32, 32),
      // Speculative decoding: a few queries against a long cache,
      // bottom-right (1 < tq < tk).
      chunked_prefill(
          shape("speculative decoding, 4 queries over 2000 keys", 1, 2, 1, 4, 2000, 32, 32)),
  };
}

namespace {

constexpr const char* kCoverFactorNames[kCoverFactors] = {
    "causal", "window", "mask", "key padding", "bias", "softcap", "sink", "GQA"};

bool sink_allowed(const GenSpec& spec) { return detail::may_have(spec, ATTNCHECK_FEATURE_SINK); }

// A combination of the covering rule: factors a < b with values va, vb.
struct PairCombo {
  int a, b;
  bool va, vb;
  bool met_by(uint32_t f) const {
    return (((f >> a) & 1u) != 0) == va && (((f >> b) & 1u) != 0) == vb;
  }
};

std::vector<PairCombo> pair_combos(uint32_t declared) {
  std::vector<PairCombo> out;
  for (int a = 0; a < kCoverFactors; ++a)
    for (int b = a + 1; b < kCoverFactors; ++b) {
      if (!((declared >> a) & 1u) || !((declared >> b) & 1u)) continue;
      for (const bool va : {false, true})
        for (const bool vb : {false, true}) out.push_back({a, b, va, vb});
    }
  return out;
}

std::vector<PairCombo> uncovered(const std::vector<uint32_t>& have, uint32_t declared) {
  std::vector<PairCombo> out;
  for (const PairCombo& c : pair_combos(declared)) {
    bool met = false;
    for (const uint32_t f : have) met = met || c.met_by(f);
    if (!met) out.push_back(c);
  }
  return out;
}

// The unfitted shape with exactly the factors of `f` on: 160 keys and 48
// queries of dk 64 (four heads, eight over two K/V heads with GQA), a
// window whose left edge falls inside a key block, a softcap of 5.
SizeShape covering_shape(uint32_t f) {
  const bool gqa = (f & kCoverGqa) != 0;
  SizeShape s = shape("covering rule", 1, gqa ? 8 : 4, gqa ? 2 : 4, 48, 160, 64, 64);
  if (f & kCoverCausal) s = causal(s, Align::bottom_right);
  if (f & kCoverWindow) s = windowed(s, 37, (f & kCoverCausal) ? -1 : 19, Align::bottom_right);
  s.explicit_mask = (f & kCoverMask) != 0;
  s.key_padding = (f & kCoverKeyPadding) != 0;
  s.bias = (f & kCoverBias) != 0;
  s.softcap = (f & kCoverSoftcap) ? 5 : 0;
  s.sink = (f & kCoverSink) ? 1 : 0;
  std::string on;
  for (int k = 0; k < kCoverFactors; ++k)
    if ((f >> k) & 1u) on += (on.empty() ? "" : ", ") + std::string(kCoverFactorNames[k]);
  s.label = "covering rule: " + (on.empty() ? std::string("none") : on);
  return s;
}

}  // namespace

const char* cover_factor_name(int k) { return kCoverFactorNames[k]; }

uint32_t cover_factors(const SizeShape& s, const GenSpec& spec) {
  uint32_t f = 0;
  if (s.causal) f |= kCoverCausal;
  if (s.windowed()) f |= kCoverWindow;
  if (s.explicit_mask) f |= kCoverMask;
  if (s.key_padding) f |= kCoverKeyPadding;
  if (s.bias) f |= kCoverBias;
  if (s.softcap > 0) f |= kCoverSoftcap;
  if (s.kv_heads < s.heads) f |= kCoverGqa;
  if (sink_allowed(spec) && (s.sink == 1 || (s.sink < 0 && s.variant % 2 == 1))) f |= kCoverSink;
  return f;
}

uint32_t declared_cover_factors(const GenSpec& spec) {
  const auto has = [&](Features bit) { return (spec.features & bit) != 0; };
  uint32_t f = 0;
  if (has(ATTNCHECK_FEATURE_CAUSAL)) f |= kCoverCausal;
  if (has(ATTNCHECK_FEATURE_WINDOW)) f |= kCoverWindow;
  if (has(ATTNCHECK_FEATURE_MASK)) f |= kCoverMask;
  if (has(ATTNCHECK_FEATURE_KEY_VALID)) f |= kCoverKeyPadding;
  if (has(ATTNCHECK_FEATURE_BIAS)) f |= kCoverBias;
  if (has(ATTNCHECK_FEATURE_SOFTCAP)) f |= kCoverSoftcap;
  if (sink_allowed(spec)) f |= kCoverSink;
  if (has(ATTNCHECK_FEATURE_GQA)) f |= kCoverGqa;
  return f;
}

std::vector<SizeShape> covering_shapes(const std::vector<SizeShape>& planned, const GenSpec& spec,
                                       int64_t cap, int64_t weight, int64_t first_variant,
                                       size_t max_shapes) {
  const uint32_t declared = declared_cover_factors(spec);
  std::vector<uint32_t> have;
  for (const SizeShape& s : planned) have.push_back(cover_factors(s, spec));
  std::vector<SizeShape> added;
  std::vector<uint32_t> tried;
  while (added.size() < max_shapes) {
    const std::vector<PairCombo> missing = uncovered(have, declared);
    if (missing.empty()) break;
    // The factor set (a subset of the declared ones, not tried yet) that
    // meets the most missing combinations; the smallest set on a tie.
    uint32_t best = 0;
    size_t best_gain = 0;
    for (uint32_t f = declared;; f = (f - 1) & declared) {
      if (std::find(tried.begin(), tried.end(), f) == tried.end()) {
        size_t gain = 0;
        for (const PairCombo& c : missing) gain += c.met_by(f);
        if (gain > best_gain || (gain == best_gain && gain > 0 && __builtin_popcount(f) <
                                                                      __builtin_popcount(best))) {
          best = f;
          best_gain = gain;
        }
      }
      if (f == 0) break;
    }
    if (best_gain == 0) break;
    tried.push_back(best);
    SizeShape s = covering_shape(best);
    SizeShape fitted = fit_shape(s, spec, cap, weight);
    fitted.variant = first_variant + static_cast<int64_t>(added.size());
    const uint32_t got = cover_factors(fitted, spec);
    size_t gain = 0;
    for (const PairCombo& c : missing) gain += c.met_by(got);
    if (gain == 0) continue;  // fitting took what it was for (a limit)
    have.push_back(got);
    added.push_back(s);
  }
  return added;
}

std::vector<std::string> uncovered_pairs(const std::vector<SizeShape>& shapes,
                                         const GenSpec& spec) {
  std::vector<uint32_t> have;
  for (const SizeShape& s : shapes) have.push_back(cover_factors(s, spec));
  std::vector<std::string> out;
  for (const PairCombo& c : uncovered(have, declared_cover_factors(spec))) {
    out.push_back(fmt::format("{} {}, {} {}", kCoverFactorNames[c.a], c.va ? "on" : "off",
                              kCoverFactorNames[c.b], c.vb ? "on" : "off"));
  }
  return out;
}

SizeShape random_real_shape(Profile profile, uint64_t seed) {
  uint64_t state = seed;
  const auto next = [&](uint64_t n) { return static_cast<int64_t>(mix(state++) % n); };
  const int max_k = profile == Profile::thorough ? 14 : 12;
  const int64_t max_len = int64_t{1} << max_k;
  const auto length = [&] {
    if (next(2)) return 1 + next(static_cast<uint64_t>(max_len));  // arbitrary
    const int64_t p = int64_t{1} << (4 + next(static_cast<uint64_t>(max_k - 3)));
    return p - 1 + next(3);  // 2^k - 1, 2^k, 2^k + 1
  };
  static constexpr std::array<int64_t, 15> kDims = {32, 40, 48, 59, 64,  72,  80, 96,
                                                     111, 112, 128, 160, 192, 256, 192};
  static constexpr std::array<std::array<int64_t, 2>, 7> kHeads = {
      {{8, 1}, {8, 2}, {9, 3}, {12, 4}, {16, 4}, {32, 8}, {64, 8}}};
  SizeShape s;
  s.batch = 2 + next(2);
  const auto& hk = kHeads[static_cast<size_t>(next(kHeads.size()))];
  s.heads = hk[0];
  s.kv_heads = hk[1];
  s.tk = length();
  s.tq = length();
  const size_t d = static_cast<size_t>(next(kDims.size()));
  s.dk = kDims[d];
  s.dv = d + 1 == kDims.size() ? 128 : s.dk;  // the last entry: 192 with dv 128
  switch (next(4)) {
    case 0:
      s = decode(s);
      s.label = "random decode";
      break;
    case 1:
      s.tq = std::min(s.tq, s.tk);
      s = chunked_prefill(s);
      s.label = "random chunked prefill";
      break;
    default:
      s.label = "random";
  }
  // Half of the draws take one structure of the covering set (SPEC 3),
  // drawn after the dims so that those stay what they were.
  static constexpr std::array<double, 3> kCaps = {1, 5, 30};
  switch (next(12)) {
    case 0:
      if (!s.causal) s = causal(s, next(2) ? Align::top_left : Align::bottom_right);
      break;
    case 1: {  // the left edge inside a block of 16, 32 and 64 keys
      int64_t left = 1 + next(static_cast<uint64_t>(std::min<int64_t>(s.tk, 1024)));
      if (left % 16 == 0) left += 1 + next(15);
      const int64_t rights[] = {0, -1, 1 + next(64)};
      // One query sits at key 0 top-left: bottom-right puts it at the end.
      s = windowed(s, left, rights[next(3)], s.tq == 1 ? Align::bottom_right : s.align);
      break;
    }
    case 2:
      s.explicit_mask = true;
      break;
    case 3:
      s.bias = true;
      break;
    case 4:  // softcap and no mask at all
      s.softcap = kCaps[static_cast<size_t>(next(kCaps.size()))];
      s.causal = s.key_padding = false;
      break;
    case 5:
      s.softcap = kCaps[static_cast<size_t>(next(kCaps.size()))];
      s.explicit_mask = true;
      break;
    default:
      break;
  }
  return s;
}

}  // namespace attncheck::gen
