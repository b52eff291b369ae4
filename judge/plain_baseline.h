#pragma once
// The baseline of SPEC 2's AsAccurateAsBaseline: the plain algorithm in an
// implementation's declared formats (one pass in key order, max first),
// whose error against the exact result tells what accuracy those formats
// allow where the first-order analysis of SPEC 4 stops.

#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck {

/// The baseline output b of SPEC 2 for a dense problem `p` under the
/// declared precision `t`, laid out like the oracle's out ([b][h][tq][dv]):
/// the logical problem (descales applied), per row one pass in key order
/// after the max; Q rounded to t.q_cast_format(kv), S to t.s_cast_format(),
/// each p_j = exp(s_j - m) to t.p_cast; every other operation rounded to
/// the working format W (f64 when every declared stage format is f64, else
/// f32); o = (sum_j p_j v_j) / l rounded to p.dtype. A sink is a key with
/// value 0. Empty rows give 0. Throws std::invalid_argument for a varlen p.
std::vector<double> baseline_out(const Problem& p, const PrecisionTraits& t);

/// The working format W of baseline_out under `t` for K/V in `kv`: f64
/// when Q's rounding (if any), the q.k sums, the stored scores, the
/// softmax, P's cast and the P.V accumulator are all declared f64, else f32.
DType baseline_working_format(const PrecisionTraits& t, DType kv);

}  // namespace attncheck
