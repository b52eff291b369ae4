#pragma once
// The draw of a small dense problem (SPEC 3): dims that grow with the
// case, the constraints the features allow (causal, window, key padding,
// mask, bias, softcap, scale, strides), and tensors from the value regimes
// within the safe limits of the formats.

#include <cstdint>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"
#include "properties/gen/spec.h"

namespace attncheck::gen::detail {

/// A dense problem within the spec in the input formats `formats`, with at
/// least one allowed key in every row; exactly spec.size's shape when the
/// spec has one (draw_sized). `max_batch`: spec.max_bh for a dense
/// problem, spec.max_sequences for one that make_varlen cuts into
/// sequences.
Problem draw_dense(const GenSpec& spec, DTypeCombo formats, int64_t max_batch);

}  // namespace attncheck::gen::detail
