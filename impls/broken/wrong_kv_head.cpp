// Grouped-query attention expanded with repeat (tiling: query head h reads
// K/V head h % kv_heads) where repeat_interleave (h / group) was meant.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "core/transforms.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// The two mappings agree when kv_heads is 1 or equals heads, so only true
// grouping (1 < kv_heads < heads) shows the bug.
ForwardResult tiled_heads(const Problem& p) {
  const Problem tiled =
      expand_kv_heads(p, [](const Problem& q, int64_t h) { return h % q.kv_heads; });
  return naive_forward(tiled, p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_wrong_kv_head, "GroupedQueryEquivalence"),
    tiled_heads));

}  // namespace
}  // namespace attncheck::impls::broken
