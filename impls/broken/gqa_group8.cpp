// Grouped-query attention whose kernel for groups of 8 or more (a path
// that packs a whole group into one query tile, taken only for big
// groups) maps query head h to K/V head h % kv_heads where h / group was
// meant. Groups of 1 to 7, and a single K/V head, are right: only 16/2,
// 64/8 and the like show it, which the CI profile's fixed GQA shapes (8/2,
// 12/4) never draw; the real-size covering set's groups of 8 and 16 over
// two K/V heads do (issue 51).

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "core/transforms.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

int64_t group8_head(const Problem& p, int64_t h) {
  const int64_t group = p.heads / p.kv_heads;
  return group >= 8 && p.kv_heads >= 2 ? h % p.kv_heads : h / group;
}

ForwardResult group8_mapped(const Problem& p) {
  return naive_forward(expand_kv_heads(p, group8_head), p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_gqa_group8, "MatchesOracle"), group8_mapped));

}  // namespace
}  // namespace attncheck::impls::broken
