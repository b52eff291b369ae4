#pragma once
// The serving parts of a draw (SPEC 1.1): the plan of which parts a
// problem takes (a sink, descales, a packed or a paged layout, a declared
// format combination), their draws, and the dense problem cut into packed
// or paged sequences.

#include <cstddef>
#include <vector>

#include "attncheck/problem.h"
#include "properties/gen/spec.h"

namespace attncheck::gen::detail {

/// What a serving draw adds to the dense problem, drawn first as one
/// ingredient so that shrinking it (towards no sink, dense layout, no
/// descale, the first combination) keeps the later draws in place.
struct ServingPlan {
  bool sink = false, descale = false, packed_q = false, packed_k = false, paged = false;
  size_t combo = 0;  ///< index into spec.combos
};

/// Whether the spec allows the serving part `bit`.
bool may_have(const GenSpec& spec, Features bit);
/// Whether every problem of the spec must have the serving part `bit`.
bool must_have(const GenSpec& spec, Features bit);

/// The layouts a problem may take, simplest first: dense, packed (queries
/// and keys, or queries only), paged (dense or packed queries). Keys are
/// paged or packed, not both.
std::vector<ServingPlan> layout_choices(const GenSpec& spec);

/// `plan` with the layout of `l`.
ServingPlan with_layout_of(ServingPlan plan, const ServingPlan& l);

/// The plan of a small problem, drawn as one ingredient; `any_combo`: a
/// declared format combination is drawn too.
ServingPlan draw_plan(const GenSpec& spec, bool any_combo);

/// Descales: powers of two and not (a descale whose product with a stored
/// value is not a double is the case the oracle must keep apart). q and k
/// stay at most 1 so scores stay inside the generator's first-order limit.
Descales draw_descales();

/// Per-head sinks from the regimes: small integers, a dyadic grid, a sink
/// that dominates its rows (above every score by 2^2 to 2^5: weights of the
/// real keys down to e^-32), one far below (no influence), and zero.
/// Representable in the output format, which is the bias format
/// (SinkIsAKeyWithoutValue adds it as a bias). `counted`: the regime is
/// counted into Coverage.
std::vector<double> draw_sinks(const Problem& p, bool counted);

/// Makes the dense problem d varlen: per-sequence lengths (0 and 1 among
/// them, the longest kept as tq / tk), packed rows and / or pages. Junk
/// fills what no sequence reads (a page's tail, unused pages): values of
/// the keys' format that PagedEqualsContiguous later makes large.
/// `at_size`: the real-size phase (SPEC 3): lengths from real_size_length,
/// pages of 16, 256 (the sizes serving caches use) and 17 (odd).
Problem make_varlen(const Problem& d, const ServingPlan& plan, bool sink, bool at_size = false);

/// SPEC 1.1's table: no key_valid, mask or bias with packed or paged.
GenSpec without_varlen_exclusions(GenSpec spec);

/// Whether the plan cuts the problem into sequences (packed or paged).
bool varlen(const ServingPlan& plan);

}  // namespace attncheck::gen::detail
