#pragma once
// The broken twins of the block-quantized K/V kernel (SPEC 1.2,
// impls/broken/quant_kv_twins.cpp): f32 outputs with q8_0 or q4_0 K/V
// only, so none takes the f64 problems of test_impls' bug cases;
// tests/impls/test_quant_kv.cpp shows each one wrong on a block problem
// and caught by its property.

#include <algorithm>
#include <array>
#include <string_view>

namespace attncheck::test_support {

inline constexpr std::array<std::string_view, 5> kBlockTwins = {
    "broken_q4_nibbles_swapped", "broken_kv_scale_next_block", "broken_q_scale_from_k_block",
    "broken_q4_offset_forgotten", "broken_last_block_dropped"};

/// Whether `name` is a twin of the block kernel, shown wrong by
/// test_quant_kv.
inline bool is_block_twin(std::string_view name) {
  return std::find(kBlockTwins.begin(), kBlockTwins.end(), name) != kBlockTwins.end();
}

/// The block twins whose bug needs a second block in a row (dk or dv 64).
/// The small problems draw K/V rows of one block nearly always: with real
/// sizes off (ATTNCHECK_REAL_SIZES=0, ci/test's sanitizer stage) these
/// escape at the default seed, and the real-size phase is what catches
/// them (and shrinks them to two blocks).
inline constexpr std::array<std::string_view, 2> kTwoBlockTwins = {"broken_kv_scale_next_block",
                                                                    "broken_last_block_dropped"};

inline bool needs_two_blocks(std::string_view name) {
  return std::find(kTwoBlockTwins.begin(), kTwoBlockTwins.end(), name) != kTwoBlockTwins.end();
}

}  // namespace attncheck::test_support
