#pragma once
// The broken implementations of serving-kernel parts (SPEC 1.1):
// each has its bug only on problems with a sink, packed sequences, paged
// K/V, descales or fp8 inputs, and names a property of SPEC 2's "Version 2
// properties" (SinkIsAKeyWithoutValue, PackedEqualsSeparate,
// PagedEqualsContiguous, DescaleEquivalence) or MatchesOracle on such
// problems. Until the catalog has those properties and generators, the
// tests that expect every broken implementation to be caught by its
// property on the generated problems (test_catalog's BrokenCatalog,
// test_driver's BrokenImplementation, test_impls' version 1 bug cases)
// leave them out; tests/impls/test_serving_impls.cpp shows each one wrong
// on a hand-built serving problem instead. Remove a twin from this list when
// its property catches it through the catalog.

#include <algorithm>
#include <array>
#include <string_view>

namespace attncheck::test_support {

inline constexpr std::array<std::string_view, 9> kServingPartTwins = {
    "broken_sink_in_numerator",     "broken_cu_seqlens_off_by_one",
    "broken_packed_align_from_max", "broken_block_table_global_index",
    "broken_paged_stale_tail",      "broken_v_descale_twice",
    "broken_v_descale_ignored",     "broken_e4m3_as_e5m2",
    "broken_fp8_p_unscaled"};

/// Whether `name` is a serving-part twin, shown wrong only by
/// test_serving_impls.
inline bool is_serving_part_twin(std::string_view name) {
  return std::find(kServingPartTwins.begin(), kServingPartTwins.end(), name) !=
         kServingPartTwins.end();
}

}  // namespace attncheck::test_support
