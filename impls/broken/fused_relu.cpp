// An activation fused into the output epilogue by mistake: out = max(out, 0).

#include <algorithm>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

ForwardResult forward(const Problem& p) {
  ForwardResult r = naive_forward(p, p.scale, true, correct_softmax());
  for (double& x : r.out) x = std::max(x, 0.0);
  return r;
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_fused_relu", "ValueLinearity",
                "a ReLU fused into the output epilogue: negative outputs become 0"),
    forward));

}  // namespace
}  // namespace attncheck::impls::broken
