#pragma once
// What a generated problem may use (SPEC 3): an implementation's declared
// features, formats and limits, what a property takes of them (the serving
// parts among them), and the sizes of a profile.

#include <limits>
#include <optional>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/properties.h"
#include "properties/gen/real_size_shapes.h"

namespace attncheck::gen {

/// What a generated problem may use.
struct GenSpec {
  DType dtype = DType::f64;
  Features features = 0;  ///< the implementation's, minus what a property excludes
  Limits limits;
  int64_t max_t = 9;   ///< tq and tk range over [1, max_t]: past blocks of 4 and 8
  int64_t max_d = 5;   ///< dk and dv range over [1, max_d]
  int64_t max_bh = 4;  ///< batch and heads range over [1, max_bh] (4 heads: GQA groups of 2)
  /// The largest key block the implementation declares (its precision's or
  /// a path's key_block, SPEC 4.1); when 2 key_block + 1 is beyond max_t,
  /// one small draw in eight takes tk in [key_block + 1, 2 key_block + 1]
  /// (within the limits), so a blocked kernel's second block and a partial
  /// one are met without the real-size phase. 0 = none.
  int64_t key_block = 0;
  /// Sequences of a packed or paged batch range over [1, max_sequences]
  /// (batch entries of a dense problem over [1, max_bh]): past 4, where a
  /// kernel that stages cu_seqlens or block-table rows for 4 sequences
  /// goes wrong.
  int64_t max_sequences = 16;
  bool require_causal = false;  ///< always causal (needs FEATURE_CAUSAL)
  bool require_window = false;  ///< always windowed (needs FEATURE_WINDOW)
  bool require_gqa = false;     ///< kv_heads < heads (needs FEATURE_GQA)
  /// When set, problem() draws exactly this shape (within the features and
  /// the require_* above) with seeded values: the real-size phase.
  std::optional<SizeShape> size;
  /// The format scores are stored in before softmax when it is not the
  /// accumulation format (PrecisionTraits::s_cast): q and k stay small
  /// enough that its rounding keeps scores within the first-order analysis.
  std::optional<DType> score_storage;
  /// The largest finite value of the narrowest format the declaration or
  /// any of its paths keeps the P.V accumulator in (pv_accum, SPEC 4.1):
  /// the large regime at size keeps unnormalised sums within it.
  double pv_range = std::numeric_limits<double>::max();
  /// The serving parts (SPEC 1.1: ATTNCHECK_FEATURE_SINK, _PACKED,
  /// _PAGED_KV, _DESCALE) a property takes in its problems, among those
  /// declared; 0 = none of them (the default: a property opts in where its
  /// statement holds for them, SPEC 2).
  Features serving = 0;
  /// Serving parts every problem has (a subset of serving): a sink, a
  /// packed or a paged layout, descales.
  Features serving_required = 0;
  /// The property takes the declared mixed format combinations
  /// (with_serving_parts, with_sinks), whether or not the implementation
  /// declares any serving part (serving may be 0).
  bool mixed_formats = false;
  /// The input formats a problem may take, each {q, kv, out = dtype}: the
  /// implementation's declared combinations with this output format (empty:
  /// q = kv = dtype). Each problem draws one; without mixed_formats only
  /// {dtype, dtype, dtype} is drawn (where declared).
  std::vector<DTypeCombo> combos;
};

/// Every serving part's feature bit (SPEC 1.1).
inline constexpr Features kServingParts = ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_PACKED |
                                          ATTNCHECK_FEATURE_PAGED_KV | ATTNCHECK_FEATURE_DESCALE;

/// The spec with every serving part the implementation declares allowed
/// (spec.serving = its declared serving bits) and the declared mixed
/// format combinations.
inline GenSpec with_serving_parts(GenSpec spec) {
  spec.serving = spec.features & kServingParts;
  spec.mixed_formats = true;
  return spec;
}

/// The spec with a sink allowed where the implementation declares one and
/// no other serving part: the sink forms of the properties of dense
/// problems (SPEC 2, "With a sink the version 1 properties read").
inline GenSpec with_sinks(GenSpec spec) {
  spec.serving = spec.features & ATTNCHECK_FEATURE_SINK;
  spec.mixed_formats = true;
  return spec;
}

/// The spec for an implementation in a dtype.
GenSpec spec_for(const ImplInfo& info, DType dtype);

/// The spec for an implementation in a dtype, with larger sizes under the
/// thorough profile.
GenSpec spec_for(const ImplInfo& info, DType dtype, Profile profile);

}  // namespace attncheck::gen
