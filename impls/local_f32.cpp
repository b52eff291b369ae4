// Sliding-window attention in float that computes only the scores inside each
// query's window (about tq * w of them, not tq * tk) and counts them.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "local_kernel.h"

namespace attncheck::impls {
namespace {

// No weights: a dense tq x tk weight array would make the result itself
// quadratic in the sequence length, which is what a window is meant to
// avoid (attncheck bench's window preset measures it). The properties
// observe its weights through V = I, as for the online kernels; local_f64
// returns weights from the same kernel.
ATTNCHECK_REGISTER_IMPL(std::make_shared<CountingImpl>(
    reference_info("local_f32", DType::f32, kLoopFeatures & ~ATTNCHECK_FEATURE_WEIGHTS,
                   EmptyRowPolicy::error,
                   "sliding-window attention in float visiting only the keys inside each "
                   "query's window and causal limit, every feature but weights (time and "
                   "memory linear in tq for a fixed window); counts the scores it "
                   "computes; empty rows are an error"),
    [](const Problem& p, int64_t* n) {
      return local_forward<float>(p, EmptyRowPolicy::error, n, /*with_weights=*/false);
    }));

}  // namespace
}  // namespace attncheck::impls
