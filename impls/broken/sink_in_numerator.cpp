// A sink added to the numerator too: the accumulator starts from the sink's
// exp as the sum does, as if the sink were a key whose value is all ones.
// Weights are right; every output gains a_sink (a row of only the sink
// gives 1, not 0).

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(
    paged_twin("broken_sink_in_numerator", "SinkIsAKeyWithoutValue",
               "paged_online_f32 whose accumulator starts at exp(sink - m) like "
               "the sum: the sink added to the numerator (o gains a_sink)",
               [] {
                 PagedOptions b;
                 b.sink_in_numerator = true;
                 return b;
               }()));

}  // namespace
}  // namespace attncheck::impls::broken
