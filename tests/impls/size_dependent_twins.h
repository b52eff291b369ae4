#pragma once
// The broken implementations whose bug lives only at real sizes (issue 15,
// SPEC 3 "Real sizes"): a 64-key tile, rows past 256 keys, GQA groups of
// more than 2 over several K/V heads, head dims past 32 or 128. They pass
// every property on the small problems the generators draw today (proven
// by test_broken_at_size), so the tests that expect every broken
// implementation to be caught with a small counterexample (test_catalog's
// BrokenCatalog, test_impls' bug cases) leave them out; the real-size
// phase catches them (test_runner's BrokenImplementation, and
// test_broken_at_size with seeds 1 to 3 and the shrunk lengths).

#include <algorithm>
#include <array>
#include <string_view>

namespace attncheck::test_support {

inline constexpr std::array<std::string_view, 9> kSizeDependentTwins = {
    "broken_tile64_drops_tail",   "broken_long_row_lossy_sum",    "broken_gqa_big_groups",
    "broken_split_kv_no_rescale", "broken_causal_skip_top_left",  "broken_head_dim_truncated",
    "broken_odd_dim_padding_lanes", "broken_decode_ignores_padding",
    "broken_block_table_64_entries"};

/// Whether `name` is caught only with real sizes.
inline bool caught_only_at_real_size(std::string_view name) {
  return std::find(kSizeDependentTwins.begin(), kSizeDependentTwins.end(), name) !=
         kSizeDependentTwins.end();
}

}  // namespace attncheck::test_support
