// Online softmax without the guard for a fully masked block: while the
// running max is still -inf, exp(-inf - -inf) = NaN poisons the row.
// flash-attention guards this case ("Check_inf") for exactly that reason.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr size_t kBlock = 2;

// Like a tiled kernel, each block computes exp(x - m_new) for every key,
// masked ones holding x = -inf. A masked block after an allowed key gives
// exact zeros; a leading one (key padding or a mask at the start, or a
// window's left edge) has m_new = -inf and makes its weights, the rescale
// factor and the sum NaN.
double unguarded(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                 std::span<double> a) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double m = -kInf;
  double l = 0;
  for (size_t start = 0; start < s.size(); start += kBlock) {
    const size_t end = std::min(start + kBlock, s.size());
    double m_new = m;
    for (size_t j = start; j < end; ++j)
      if (ok[j]) m_new = std::max(m_new, s[j]);
    const double c = std::exp(m - m_new);
    for (size_t j = 0; j < start; ++j) a[j] *= c;
    l *= c;
    for (size_t j = start; j < end; ++j) {
      a[j] = std::exp((ok[j] ? s[j] : -kInf) - m_new);
      l += a[j];
    }
    m = m_new;
  }
  for (double& x : a) x /= l;
  return m + std::log(l);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_online_masked_block_nan", "MatchesOracle",
                           "online softmax over key blocks of 2 without the -inf guard: a fully "
                           "masked leading block computes exp(-inf - -inf) = NaN");
  i.precision.key_block = static_cast<int64_t>(kBlock);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(unguarded));
}));

}  // namespace
}  // namespace attncheck::impls::broken
