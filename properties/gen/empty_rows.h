#pragma once
// Rows without an allowed key (SPEC 1: an empty row's output is 0 and its
// lse -inf): problems made to have one, and the repair that keeps every
// other draw's rows non-empty.

#include <rapidcheck.h>

#include "attncheck/problem.h"
#include "properties/gen/spec.h"

namespace attncheck::gen {

/// A problem in which at least one row has no allowed key, made through key
/// padding, an explicit mask, bottom-right causal with tq > tk, or a window,
/// whichever the features allow. Requires can_make_empty_rows(spec).
rc::Gen<Problem> problem_with_empty_row(const GenSpec& spec);

/// True when the features offer a way to make a row empty.
bool can_make_empty_rows(const GenSpec& spec);

namespace detail {

/// Makes every row of a dense problem non-empty without drawing anything
/// new: first unbinds the window where it excludes every key, then
/// re-allows each row's first structurally allowed key in the key padding
/// and the mask.
void repair_empty_rows(Problem& p);

/// A window, or bottom-right causal over a sequence with fewer keys than
/// queries, may leave a packed or paged sequence's rows without keys:
/// without a sink, unbinds the window, then the causal mask (as
/// repair_empty_rows does for dense problems).
void unbind_empty_rows(Problem& p);

}  // namespace detail
}  // namespace attncheck::gen
