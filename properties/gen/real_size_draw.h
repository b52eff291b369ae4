#pragma once
// The draw of a problem at a real-size shape (SPEC 3 "Real sizes"): values
// a function of one drawn seed and each element's position, the shape's
// value regime and structure, and the serving parts read from the shape's
// variant, so that the size search keeps every value where it was while
// it shrinks the shape.

#include <cstdint>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"
#include "properties/gen/real_size_shapes.h"
#include "properties/gen/serving_plans.h"
#include "properties/gen/spec.h"

namespace attncheck::gen::detail {

/// A problem of exactly spec.size's shape (within the features and the
/// require_* of the spec) in the input formats `formats`, its values a
/// function of one drawn seed and each element's position.
Problem draw_sized(const GenSpec& spec, DTypeCombo formats);

/// A sequence length in [lo, n] at real sizes: n itself, one of the grid's
/// lengths that straddle a tile (2^k - 1, 2^k + 1) or any length.
int64_t real_size_length(int64_t lo, int64_t n);

/// The serving parts of a real-size draw (SPEC 3: every declared format
/// combination, sinks, descales, packed and paged layouts), read from the
/// shape's variant instead of drawn: the real-size phase numbers its
/// shapes, so one run's shapes take the declared combinations, sinks (odd
/// variants), descales (variants 1 and 2 mod 4) and layouts (every third
/// variant moves to the next) in turn, and the size search, which keeps the
/// variant, keeps them while it shrinks the shape.
ServingPlan size_plan(const GenSpec& spec, bool any_combo);

/// A real-size shape cut into 5 to 16 sequences (SPEC 3: batches past the
/// 4 a kernel may stage; s.sequences once the size search has shrunk
/// them), the cost kept near the shape's: fewer K/V heads (the group
/// kept), then fewer queries. make_varlen gives the sequences after the
/// first at most a quarter of its lengths.
SizeShape as_sequences(SizeShape s);

}  // namespace attncheck::gen::detail
