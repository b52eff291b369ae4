// An ALiBi-style position bias left switched on in a model that does not
// use it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// s_ij -= 0.5 |i - j| before the softmax: scores depend on positions, so
// permuting keys and values changes the output.
double alibi(std::span<const double> s, std::span<const uint8_t> ok, int64_t i,
             std::span<double> a) {
  std::vector<double> biased(s.begin(), s.end());
  for (size_t j = 0; j < s.size(); ++j)
    biased[j] -=
        0.5 * static_cast<double>(std::abs(i - static_cast<int64_t>(j)));
  return stable_softmax(biased, ok, a);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_alibi_always_on", "PermutationEquivariance",
                "an ALiBi position bias -0.5 |i - j| is always added to the "
                "scores"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, by_rows(alibi));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
