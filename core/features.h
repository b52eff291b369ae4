#pragma once
// The names of an implementation's declared bits: ATTNCHECK_FEATURE_* and
// ATTNCHECK_FTZ_* of plugin.h, in one table, so `attncheck describe`, the
// JSON report and a plugin author's header use the same words.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"

namespace attncheck {

/// One named bit.
struct NamedBit {
  uint32_t bit;
  std::string_view name;  ///< the macro's name without its prefix: "CAUSAL"
};

/// Every ATTNCHECK_FEATURE_* bit with its name, in bit order.
std::span<const NamedBit> feature_table();

/// Every ATTNCHECK_FTZ_* bit with its name ("ACCUM", "P_CAST", "OUT",
/// "PV_ACCUM").
std::span<const NamedBit> ftz_format_table();

/// The names of the bits set in `bits` under `table`, in bit order; a set
/// bit the table does not name is "bit N", so nothing declared is hidden.
std::vector<std::string> bit_names(uint32_t bits, std::span<const NamedBit> table);

/// bit_names(features, feature_table()).
inline std::vector<std::string> feature_names(Features features) {
  return bit_names(features, feature_table());
}

}  // namespace attncheck
