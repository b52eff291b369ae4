// A sliding window off by one at its left edge (p_i - left < j where
// p_i - left <= j was meant): each query sees one key fewer.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// The right edge is right. With left = 0 and right = 0 a row loses its one
// key and the softmax of no keys gives a zero row.
ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_window_off_by_one, "WindowLocality"),
    [](const Problem& p) {
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             const int64_t pos = p.position(i);
                             return allowed_except(p, Constraint::window, b, h, i, j) &&
                                    (p.window_left < 0 || pos - p.window_left < j) &&
                                    (p.window_right < 0 || j <= pos + p.window_right);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
