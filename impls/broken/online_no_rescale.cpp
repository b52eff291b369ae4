// Online (flash-style) softmax over key blocks that forgets to rescale what
// it has accumulated when the running max grows.

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

// Each block's weights are exp(s - m) with the max known at that block, but
// earlier weights and the sum keep their old max: right when the first
// block holds the row max, too large for earlier blocks otherwise.
double no_rescale(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                  std::span<double> a) {
  double m = -std::numeric_limits<double>::infinity();
  double l = 0;
  for (size_t start = 0; start < s.size(); start += kBlock) {
    const size_t end = std::min(start + kBlock, s.size());
    double m_new = m;
    for (size_t j = start; j < end; ++j)
      if (ok[j]) m_new = std::max(m_new, s[j]);
    if (m_new == -std::numeric_limits<double>::infinity()) continue;
    for (size_t j = start; j < end; ++j) {
      if (!ok[j]) continue;
      a[j] = std::exp(s[j] - m_new);
      l += a[j];
    }
    m = m_new;
  }
  for (size_t j = 0; j < s.size(); ++j)
    if (ok[j]) a[j] /= l;
  return m + std::log(l);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_online_no_rescale", "MatchesOracle",
                           "online softmax over key blocks of 2 that does not rescale the "
                           "accumulated weights and sum when the running max increases");
  i.precision.key_block = static_cast<int64_t>(kBlock);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(no_rescale));
}));

}  // namespace
}  // namespace attncheck::impls::broken
