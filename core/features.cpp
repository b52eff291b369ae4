#include "core/features.h"

#include <array>

namespace attncheck {

std::span<const NamedBit> feature_table() {
  static constexpr std::array<NamedBit, 19> kTable = {{
      {ATTNCHECK_FEATURE_KEY_VALID, "KEY_VALID"},
      {ATTNCHECK_FEATURE_CAUSAL, "CAUSAL"},
      {ATTNCHECK_FEATURE_WINDOW, "WINDOW"},
      {ATTNCHECK_FEATURE_MASK, "MASK"},
      {ATTNCHECK_FEATURE_BIAS, "BIAS"},
      {ATTNCHECK_FEATURE_GQA, "GQA"},
      {ATTNCHECK_FEATURE_STRIDES, "STRIDES"},
      {ATTNCHECK_FEATURE_WEIGHTS, "WEIGHTS"},
      {ATTNCHECK_FEATURE_LSE, "LSE"},
      {ATTNCHECK_FEATURE_BACKWARD, "BACKWARD"},
      {ATTNCHECK_FEATURE_SOFTCAP, "SOFTCAP"},
      {ATTNCHECK_FEATURE_ALIGN_TOP_LEFT, "ALIGN_TOP_LEFT"},
      {ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT, "ALIGN_BOTTOM_RIGHT"},
      {ATTNCHECK_FEATURE_SCALE, "SCALE"},
      {ATTNCHECK_FEATURE_NONDETERMINISTIC, "NONDETERMINISTIC"},
      {ATTNCHECK_FEATURE_SINK, "SINK"},
      {ATTNCHECK_FEATURE_PACKED, "PACKED"},
      {ATTNCHECK_FEATURE_PAGED_KV, "PAGED_KV"},
      {ATTNCHECK_FEATURE_DESCALE, "DESCALE"},
  }};
  return kTable;
}

std::span<const NamedBit> ftz_format_table() {
  static constexpr std::array<NamedBit, 4> kTable = {{
      {ATTNCHECK_FTZ_ACCUM, "ACCUM"},
      {ATTNCHECK_FTZ_P_CAST, "P_CAST"},
      {ATTNCHECK_FTZ_OUT, "OUT"},
      {ATTNCHECK_FTZ_PV_ACCUM, "PV_ACCUM"},
  }};
  return kTable;
}

std::vector<std::string> bit_names(uint32_t bits, std::span<const NamedBit> table) {
  std::vector<std::string> names;
  for (uint32_t i = 0; i < 32; ++i) {
    const uint32_t bit = uint32_t{1} << i;
    if (!(bits & bit)) continue;
    std::string name = "bit " + std::to_string(i);
    for (const NamedBit& n : table)
      if (n.bit == bit) name = std::string(n.name);
    names.push_back(std::move(name));
  }
  return names;
}

}  // namespace attncheck
