// Top-left and bottom-right alignment swapped in the kernel and in its front
// end's empty-row check, which lists every row it finds empty: asked for
// top-left with tq > tk, the first tq - tk queries sit before key 0 under
// bottom-right and the call is rejected, although each sees key 0.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ForwardResult swapped(const Problem& p) {
  Problem other = p;
  other.align = p.align == Align::top_left ? Align::bottom_right : Align::top_left;
  const KeyRule rule = [&other](int64_t b, int64_t h, int64_t i, int64_t j) {
    return other.allowed(b, h, i, j);
  };
  if (auto message = empty_rows_error_under(p, rule, true)) return ForwardResult::failure(*message);
  return naive_forward(other, p.scale, false, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_alignment_swapped_rejects, "MatchesOracle"),
    swapped));

}  // namespace
}  // namespace attncheck::impls::broken
