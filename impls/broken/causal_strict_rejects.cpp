// A strict causal mask (j < p_i, the diagonal masked) whose front end checks
// for empty rows with the same strict rule: a query at position 0 (the first
// one under top-left alignment) has no key left under it, so the call is
// rejected although that query may see key 0.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ForwardResult strict(const Problem& p) {
  const KeyRule rule = [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
    return allowed_except(p, Constraint::causal, b, h, i, j) && (!p.causal || j < p.position(i));
  };
  if (auto message = empty_rows_error_under(p, rule)) return ForwardResult::failure(*message);
  return naive_forward(p, p.scale, false, correct_softmax(), rule);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_causal_strict_rejects, "MatchesOracle"),
    strict));

}  // namespace
}  // namespace attncheck::impls::broken
