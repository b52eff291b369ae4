// A sliding window without its left edge (p_i - left < j, a strict
// comparison where SPEC 1 has p_i - left <= j) whose front end checks for
// empty rows with the same rule: a window of left = 0 keeps no key at or
// before p_i, so a causal call with it is rejected although each query may
// see its own position.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ForwardResult strict_window(const Problem& p) {
  const KeyRule rule = [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
    const bool left = p.window_left < 0 || j > p.position(i) - p.window_left;
    const bool right = p.window_right < 0 || j <= p.position(i) + p.window_right;
    return allowed_except(p, Constraint::window, b, h, i, j) && left && right;
  };
  if (auto message = empty_rows_error_under(p, rule)) return ForwardResult::failure(*message);
  return naive_forward(p, p.scale, false, correct_softmax(), rule);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_window_strict_rejects, "MatchesOracle"),
    strict_window));

}  // namespace
}  // namespace attncheck::impls::broken
