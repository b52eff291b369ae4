// Top-left and bottom-right alignment swapped, as between libraries whose
// causal conventions differ (flash-attention changed its own in 2.1).

#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// The empty-row check sees the requested alignment; the kernel the other
// one. The two coincide when tq == tk, so only tq != tk shows the bug.
ForwardResult swapped(const Problem& p) {
  if (auto message = first_empty_row_error(p)) {
    return ForwardResult::failure(*message);
  }
  Problem other = p;
  other.align = p.align == Align::top_left ? Align::bottom_right : Align::top_left;
  return naive_forward(other, p.scale, false, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_alignment_swapped, "MatchesOracle"),
    swapped));

}  // namespace
}  // namespace attncheck::impls::broken
