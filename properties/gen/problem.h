#pragma once
// The generator of whole problems (SPEC 3), for RapidCheck: a dense draw,
// with the serving parts a property takes, at a real-size shape where the
// spec has one.

#include <cstdint>
#include <ostream>
#include <vector>

#include <rapidcheck.h>

#include "attncheck/problem.h"
#include "properties/gen/spec.h"

namespace attncheck::gen {

/// A problem with at least one allowed key in every row. Dims shrink
/// towards 1, values towards 0 and small integers, masks towards none.
rc::Gen<Problem> problem(const GenSpec& spec);

/// A random permutation of [0, n) that shrinks to the identity (only inside
/// a RapidCheck property or generator).
std::vector<int64_t> permutation(int64_t n);

namespace detail {

/// problem()'s draws, inside a generator that draws more after them.
Problem draw_problem(const GenSpec& spec);

}  // namespace detail
}  // namespace attncheck::gen

namespace attncheck {
/// RapidCheck's printer for a problem (shapes, masks, values).
void showValue(const Problem& p, std::ostream& os);
}  // namespace attncheck
