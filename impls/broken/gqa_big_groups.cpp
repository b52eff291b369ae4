// Grouped-query attention whose kernel for groups larger than 2 (a packed
// path that folds the group into the query tile) maps query head h to K/V
// head h % kv_heads (repeat) where h / group (repeat_interleave) was meant.
// Groups of 1 and 2 take the right mapping, and with a single K/V head the
// two agree: only heads / kv_heads > 2 with kv_heads >= 2 (8/2, 12/4,
// 32/8) shows it, never 4 heads or fewer.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "core/transforms.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

int64_t big_group_head(const Problem& p, int64_t h) {
  const int64_t group = p.heads / p.kv_heads;
  return group > 2 && p.kv_heads >= 2 ? h % p.kv_heads : h / group;
}

ForwardResult big_group_mapped(const Problem& p) {
  return naive_forward(expand_kv_heads(p, big_group_head), p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_gqa_big_groups, "MatchesOracle"),
    big_group_mapped));

}  // namespace
}  // namespace attncheck::impls::broken
