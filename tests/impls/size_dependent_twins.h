#pragma once
// The broken implementations whose bug lives only at real sizes
// (SPEC 3 "Real sizes"): rows past 256 keys, GQA groups of
// more than 2 over several K/V heads, head dims past 32, 64 or 128, windows
// and causal bounds past one key block, a softcap on a path from 64
// queries. They pass
// every property on the small problems the generators draw today (proven
// by test_broken_at_size), so the tests that expect every broken
// implementation to be caught with a small counterexample (test_catalog's
// BrokenCatalog, test_impls' bug cases) leave them out; the real-size
// phase catches them (test_driver's BrokenImplementation, and
// test_broken_at_size with seeds 1 to 3 and the shrunk lengths).

#include <algorithm>
#include <array>
#include <string_view>

namespace attncheck::test_support {

inline constexpr std::array<std::string_view, 13> kSizeDependentTwins = {
    "broken_long_row_lossy_sum",    "broken_gqa_big_groups",
    "broken_causal_skip_top_left",  "broken_head_dim_truncated",
    "broken_odd_dim_padding_lanes", "broken_decode_ignores_padding",
    "broken_block_table_64_entries",
    // A value regime of the real-size phase as well (generators.h:
    // SizeRegime): rows whose every score is far below 0, one dominant key
    // past the first 64 (which the small draws that cross a key block meet
    // at some seeds: kReachedBySmallDraws).
    "broken_running_max_from_zero", "broken_max_from_first_block",
    // The structure drawn at size (SPEC 3's covering set): a window edge
    // inside a 64-key block, a causal bound over 128-query tiles, a head-dim
    // tail past 64, a softcap on the unmasked tiled path from 64 queries.
    "broken_window_skips_partial_block", "broken_causal_bound_first_row",
    "broken_head_dim_tail_overread", "broken_softcap_pads_tile"};

/// Twins whose bug lives past the key block they declare (a 64-key tile's
/// tail dropped, a split-K/V combine without rescale): real sizes used to
/// be the only way to them; since the small draws cross a declared key
/// block (GenSpec::key_block, issue 49) the small problems catch them at
/// seeds 1 to 3 too (test_broken_at_size's KeyBlockTwins). The catalog
/// tests that hold each twin to a hand-made small case still leave them
/// out (caught_only_at_real_size), as they did.
inline constexpr std::array<std::string_view, 2> kKeyBlockTwins = {
    "broken_tile64_drops_tail", "broken_split_kv_no_rescale"};

/// Size-dependent twins the small draws that cross a key block meet at
/// some seeds: no longer claimed to pass every small problem.
inline constexpr std::array<std::string_view, 1> kReachedBySmallDraws = {
    "broken_max_from_first_block"};

/// Serving-kernel twins (impls/broken/, on paged_online_f32)
/// whose bug needs rows past 256 keys or 16-key blocks past the first,
/// which the CI profile's small problems (9 keys) never reach: the split-K/V
/// path's sink and descales, its max_seqlen_k reads, a sink lost at a
/// rescale. The real-size phase draws sinks, descales and packed batches
/// and catches them (test_driver's BrokenImplementation); the thorough
/// profile's small problems (19 keys) may catch the rescale one too, so
/// they are not among the twins above, which pass every small problem.
inline constexpr std::array<std::string_view, 5> kServingTwinsAtSize = {
    "broken_split_sink_per_chunk", "broken_split_combine_drops_sink",
    "broken_split_drops_descales", "broken_split_reads_max_seqlen_k",
    "broken_sink_lost_on_rescale"};

/// Serving-kernel twins caught on small problems: batches past
/// 4 sequences, padded block tables.
inline constexpr std::array<std::string_view, 2> kServingTwinsSmall = {
    "broken_cu_seqlens_staged_for_4", "broken_block_table_stride_from_lengths"};

/// Twins whose arithmetic is declared honestly but is less accurate than
/// the plain algorithm in the same formats on rows beyond the declared
/// precision, which only AsAccurateAsBaseline judges (SPEC 2): an f16
/// accumulator kept over thousands of keys. Real sizes reach those rows;
/// tests/properties/test_baseline_property catches each with the CI
/// profile, seeds 1 to 3.
inline constexpr std::array<std::string_view, 1> kBaselineTwins = {"broken_pv_f16_stagnates"};

/// Twins of issue 51, each a bug the CI profile used to miss though a
/// declaration makes it reachable: Q rounded to f16 undeclared (seen only
/// with the full-mantissa Q of the real-size draws), a per-row q8_0 scale
/// for Q (the block model of Q and K), a sink lost where a window skips key
/// block 0, GQA groups of 8 or more (the covering set's 16/2 and 32/2).
/// The small draws may meet some at some seeds; the real-size covering set
/// catches each at the default seed and seeds 1 to 3
/// (test_broken_at_size's CoveringTwins).
inline constexpr std::array<std::string_view, 4> kCoveringTwins = {
    "broken_q_f16_undeclared", "broken_q8_scale_per_row", "broken_sink_lost_past_window",
    "broken_gqa_group8"};

/// Whether `name` is caught only with real sizes.
inline bool caught_only_at_real_size(std::string_view name) {
  const auto in = [name](const auto& list) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  return in(kSizeDependentTwins) || in(kKeyBlockTwins) || in(kServingTwinsAtSize) ||
         in(kBaselineTwins) || in(kCoveringTwins);
}

/// Whether `name` is one of the serving-kernel twins above.
inline bool is_serving_twin(std::string_view name) {
  return std::find(kServingTwinsAtSize.begin(), kServingTwinsAtSize.end(), name) !=
             kServingTwinsAtSize.end() ||
         std::find(kServingTwinsSmall.begin(), kServingTwinsSmall.end(), name) !=
             kServingTwinsSmall.end();
}

}  // namespace attncheck::test_support
