// SPEC 5.2's spelling of a combination of formats (--dtype, `list`, the
// report's and a fixture's "dtype").

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/implementation.h"

namespace attncheck {

DTypeCombo parse_dtype_combo(std::string_view text) {
  const std::string quoted = fmt::format("'{}'", text);
  if (text.find_first_of("=,") == std::string_view::npos) {
    for (DType d : kAllDTypes) {
      if (dtype_name(d) == text) return {d, d, d};
    }
    const bool fp8 = text == "e4m3" || text == "e5m2";
    const bool block = text == "q8_0" || text == "q4_0";
    throw InputError(fmt::format(
        "unknown dtype {} (expected f64, f32, bf16, f16 or q=F,kv=F,out=F{})", quoted,
        fp8     ? ": an fp8 format is an input format only, as q or kv"
        : block ? ": a block format stores K/V only, as in q=f32,kv=q8_0,out=f32"
                : ""));
  }
  const auto fail = [&](const std::string& why) -> DTypeCombo {
    throw InputError(
        fmt::format("dtype combination {} is not q=F,kv=F,out=F: {}", quoted, why));
  };
  DType parts[3]{};
  bool seen[3] = {false, false, false};
  constexpr std::string_view kKeys[3] = {"q", "kv", "out"};
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view part =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) return fail(fmt::format("part '{}' has no '='", part));
    const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    int k = 0;
    while (k < 3 && kKeys[k] != key) ++k;
    if (k == 3) return fail(fmt::format("unknown part '{}' (expected q, kv and out)", key));
    if (seen[k]) return fail(fmt::format("part '{}' appears twice", key));
    seen[k] = true;
    bool known = false;
    for (DType d : kAllFormats) {
      if (dtype_name(d) == value) parts[k] = d, known = true;
    }
    for (DType d : kBlockFormats) {
      if (dtype_name(d) != value) continue;
      // SPEC 1.2: the block formats store K/V only.
      if (kKeys[k] != "kv") {
        return fail(fmt::format("{} is {}, a block format for K/V only (kv=q8_0 or kv=q4_0)",
                                key, value));
      }
      parts[k] = d, known = true;
    }
    if (!known) {
      return fail(fmt::format("unknown format '{}' for {} (expected f64, f32, bf16, f16, "
                              "e4m3 or e5m2{})",
                              value, key, kKeys[k] == "kv" ? ", q8_0 or q4_0" : ""));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  for (int k = 0; k < 3; ++k) {
    if (!seen[k]) return fail(fmt::format("part '{}' is missing (every part is required)", kKeys[k]));
  }
  if (!is_output_format(parts[2])) {
    return fail(fmt::format("out is {}, an input format only (outputs are f64, f32, bf16 or f16)",
                            dtype_name(parts[2])));
  }
  return {parts[0], parts[1], parts[2]};
}

std::string combo_name(const DTypeCombo& c) {
  if (c.q == c.out && c.kv == c.out) return std::string(dtype_name(c.out));
  return fmt::format("q={},kv={},out={}", dtype_name(c.q), dtype_name(c.kv), dtype_name(c.out));
}

}  // namespace attncheck
