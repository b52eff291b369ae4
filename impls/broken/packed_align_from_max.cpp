// Bottom-right alignment of a packed batch taken from the packed maxima
// (p_i = i + tk - tq) instead of the sequence's own lengths (i + tk_b -
// tq_b): right for the longest sequences, wrong for the others.

#include "attncheck/registry.h"
#include "paged_twin.h"

namespace attncheck::impls::broken {
namespace {

ATTNCHECK_REGISTER_IMPL(paged_twin("broken_packed_align_from_max", "PackedEqualsSeparate",
                                   "paged_online_f32 aligning every sequence bottom-right by the "
                                   "problem's tq / tk (the longest) instead of its own lengths",
                                   [] {
                                     PagedOptions b;
                                     b.align_from_max_lengths = true;
                                     return b;
                                   }()));

}  // namespace
}  // namespace attncheck::impls::broken
