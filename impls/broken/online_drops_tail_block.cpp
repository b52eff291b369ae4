// Online softmax whose block loop runs tk / block times (rounding down), so
// a last, partial key block is never visited.

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

constexpr size_t kBlock = 4;

// Correct over the full blocks (max, rescale, sum); the keys past the last
// full block get no weight, and a row shorter than one block has none.
double drop_tail(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                 std::span<double> a) {
  const size_t full = s.size() / kBlock * kBlock;
  double m = -std::numeric_limits<double>::infinity();
  double l = 0;
  for (size_t start = 0; start < full; start += kBlock) {
    double m_new = m;
    for (size_t j = start; j < start + kBlock; ++j)
      if (ok[j]) m_new = std::max(m_new, s[j]);
    if (m_new == -std::numeric_limits<double>::infinity()) continue;
    const double c = std::exp(m - m_new);
    for (size_t j = 0; j < start; ++j) a[j] *= c;
    l *= c;
    for (size_t j = start; j < start + kBlock; ++j) {
      if (!ok[j]) continue;
      a[j] = std::exp(s[j] - m_new);
      l += a[j];
    }
    m = m_new;
  }
  for (size_t j = 0; j < full; ++j)
    if (ok[j]) a[j] /= l;
  return m + std::log(l);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_online_drops_tail_block", "MatchesOracle",
                           "online softmax over key blocks of 4 that skips the last block when "
                           "tk is not a multiple of 4");
  i.precision.key_block = static_cast<int64_t>(kBlock);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(drop_tail));
}));

}  // namespace
}  // namespace attncheck::impls::broken
