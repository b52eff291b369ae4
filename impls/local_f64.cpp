// Sliding-window attention in double that computes only the scores inside each
// query's window (about tq * w of them, not tq * tk) and counts them.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "local_kernel.h"

namespace attncheck::impls {
namespace {

ATTNCHECK_REGISTER_IMPL(std::make_shared<CountingImpl>(
    reference_info("local_f64", DType::f64, kLoopFeatures, EmptyRowPolicy::error,
                   "sliding-window attention in double visiting only the keys inside each "
                   "query's window and causal limit, every feature; counts the scores it "
                   "computes; empty rows are an error"),
    [](const Problem& p, int64_t* n) {
      return local_forward<double>(p, EmptyRowPolicy::error, n);
    }));

}  // namespace
}  // namespace attncheck::impls
