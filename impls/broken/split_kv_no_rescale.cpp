// Split-K/V (flash-decoding style) for rows longer than one chunk of 256
// keys: each chunk computes its own max m_c, weights exp(s_j - m_c) and sum
// l_c, and the combine adds the chunks' sums and weighted values as they
// are, forgetting the factor exp(m_c - m) that brings each chunk to the row
// max m. Right when every chunk has the same max (and always for rows of at
// most 256 keys, a single chunk).

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

constexpr size_t kChunk = 256;

double unrescaled_combine(std::span<const double> s, std::span<const uint8_t> ok, int64_t,
                          std::span<double> a) {
  if (s.size() <= kChunk) return stable_softmax(s, ok, a);
  double m = -std::numeric_limits<double>::infinity();
  double l = 0;
  for (size_t start = 0; start < s.size(); start += kChunk) {
    const size_t n = std::min(kChunk, s.size() - start);
    const auto sc = s.subspan(start, n);
    const auto okc = ok.subspan(start, n);
    const double m_c = allowed_max(sc, okc);
    if (m_c == -std::numeric_limits<double>::infinity()) continue;  // no allowed key
    l = exp_and_sum(sc, okc, m_c, a.subspan(start, n), l);           // l += l_c, unscaled
    m = std::max(m, m_c);
  }
  normalise(ok, l, a);
  return m + std::log(l);
}

ImplInfo info() {
  ImplInfo i = broken_info("broken_split_kv_no_rescale", "MatchesOracle",
                           "split-K/V over chunks of 256 keys (rows longer than 256) whose "
                           "combine forgets to rescale each chunk by exp(m_chunk - m)");
  // Each chunk's sum is one block of an online softmax.
  i.precision.key_block = static_cast<int64_t>(kChunk);
  return i;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(info(), [](const Problem& p) {
  return naive_forward(p, p.scale, true, by_rows(unrescaled_combine));
}));

}  // namespace
}  // namespace attncheck::impls::broken
