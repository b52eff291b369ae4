// Grouped-query attention expanded with repeat (tiling: query head h reads
// K/V head h % kv_heads) where repeat_interleave (h / group) was meant.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// The two mappings agree when kv_heads is 1 or equals heads, so only true
// grouping (1 < kv_heads < heads) shows the bug.
ForwardResult tiled_heads(const Problem& p) {
  Problem tiled = p;
  tiled.kv_heads = p.heads;
  tiled.k = make_tensor(p.batch, p.heads, p.tk, p.dk);
  tiled.v = make_tensor(p.batch, p.heads, p.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d) tiled.k.at(b, h, j, d) = p.k.at(b, h % p.kv_heads, j, d);
        for (int64_t d = 0; d < p.dv; ++d) tiled.v.at(b, h, j, d) = p.v.at(b, h % p.kv_heads, j, d);
      }
  return naive_forward(tiled, p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_wrong_kv_head", "GroupedQueryEquivalence",
                "GQA query head h reads K/V head h % kv_heads instead of "
                "h / (heads / kv_heads)"),
    tiled_heads));

}  // namespace
}  // namespace attncheck::impls::broken
