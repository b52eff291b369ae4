// A normalising sum whose order changes from call to call (a split-K or
// atomic reduction scheduled differently each time), in an implementation
// that does not declare NONDETERMINISTIC.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// Call n starts the sum of every row at key n mod tk and wraps around: each
// call is right within the tolerance, but two calls differ in the last bits
// once a row has three or more allowed keys.
SliceSoftmax rotated_sum(uint64_t call) {
  return by_rows(
      [call](std::span<const double> s, std::span<const uint8_t> ok, int64_t, std::span<double> a) {
        const double m = allowed_max(s, ok);
        for (size_t j = 0; j < s.size(); ++j)
          if (ok[j]) a[j] = std::exp(s[j] - m);
        double l = 0;
        for (size_t r = 0; r < s.size(); ++r) {
          const size_t j = (call + r) % s.size();
          if (ok[j]) l += a[j];
        }
        normalise(ok, l, a);
        return m + std::log(l);
      });
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_nondeterministic_sum", "Determinism",
                "the softmax sum starts at a different key on every call, so "
                "identical calls differ in the last bits (NONDETERMINISTIC "
                "not declared)"),
    [calls = std::make_shared<std::atomic<uint64_t>>(0)](const Problem& p) {
      return naive_forward(p, p.scale, true, rotated_sum((*calls)++));
    }));

}  // namespace
}  // namespace attncheck::impls::broken
