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
#include "attncheck/problem.h"

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

/// The declared features a call on `p` exercises, each a phrase naming
/// its ATTNCHECK_FEATURE_* bit: "a causal mask (CAUSAL)", ... An alignment
/// counts only where it differs from the other one (causal or window, and
/// some sequence with tq != tk); strides only on a dense problem laid out
/// otherwise than contiguously. A generated problem uses only declared
/// features, so each is one the implementation declares: the refusal rule
/// of docs/properties.md counts the cases exercising each.
std::vector<std::string> features_exercised(const Problem& p);

}  // namespace attncheck
