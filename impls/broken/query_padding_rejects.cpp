// Key padding applied on the query axis (key_valid[b][i] masks query row i)
// in the front end's empty-row check as in the kernel: a query whose index
// is a padded key's is rejected as having no allowed key, although it may
// see every valid key.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ForwardResult query_padded(const Problem& p) {
  const KeyRule rule = [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
    return allowed_except(p, Constraint::key_valid, b, h, i, j) &&
           (p.key_valid.empty() || i >= p.tk ||
            p.key_valid[static_cast<size_t>(b * p.tk + i)] != 0);
  };
  if (auto message = empty_rows_error_under(p, rule)) return ForwardResult::failure(*message);
  return naive_forward(p, p.scale, false, correct_softmax(), rule);
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_query_padding_rejects, "MatchesOracle"),
    query_padded));

}  // namespace
}  // namespace attncheck::impls::broken
