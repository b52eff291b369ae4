#include "properties/gen/value_regimes.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "attncheck/dtype.h"
#include "properties/gen/coverage.h"
#include "properties/gen/draws.h"

namespace attncheck::gen::detail {
namespace {

using rc::gen::inRange;

constexpr const char* kRegimeNames[] = {"small_int", "dyadic",    "normal",    "large",
                                        "huge",      "one_hot",   "all_equal", "near_tied",
                                        "fp8_edges"};

}  // namespace

const char* regime_name(Regime r) { return kRegimeNames[static_cast<int>(r)]; }

double format_top(DType d, int limit_exponent) {
  // 3 2^e is in every format (two significant bits), and so is its largest finite value.
  return std::min(format_max_value(d), 3 * std::ldexp(1.0, limit_exponent));
}

double stored(DType format, double x) { return is_block_format(format) ? x : round_to(format, x); }

std::vector<double> values(int64_t n, DType dtype, int huge_exponent, int large_exponent) {
  const bool fp8 = dtype == DType::e4m3 || dtype == DType::e5m2;
  const auto regime = static_cast<Regime>(pick(fp8 ? 9 : 8));
  count(std::string("regime ") + kRegimeNames[static_cast<int>(regime)]);
  if (Coverage* c = counting()) ++c->tensors;
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

}  // namespace attncheck::gen::detail
