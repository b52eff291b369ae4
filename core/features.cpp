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

namespace {

// Whether query positions depend on the alignment: top-left and
// bottom-right agree on a sequence with as many queries as keys.
bool alignment_matters(const Problem& p) {
  if (!p.causal && p.window_left < 0 && p.window_right < 0) return false;
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.seq_tq(b) != p.seq_tk(b)) return true;
  return false;
}

bool strided(const Problem& p) {
  if (p.varlen()) return false;
  return p.q.strides != contiguous_strides(p.batch, p.heads, p.tq, p.dk) ||
         p.k.strides != contiguous_strides(p.batch, p.kv_heads, p.tk, p.dk) ||
         p.v.strides != contiguous_strides(p.batch, p.kv_heads, p.tk, p.dv);
}

}  // namespace

std::vector<std::string> features_exercised(const Problem& p) {
  std::vector<std::string> f;
  const auto add = [&](bool used, const char* phrase) {
    if (used) f.emplace_back(phrase);
  };
  add(!p.key_valid.empty(), "key padding (KEY_VALID)");
  add(p.causal, "a causal mask (CAUSAL)");
  add(p.window_left >= 0 || p.window_right >= 0, "a window (WINDOW)");
  add(p.mask.has_value(), "an explicit mask (MASK)");
  add(p.bias.has_value(), "a bias (BIAS)");
  add(p.kv_heads != p.heads, "grouped K/V heads (GQA)");
  add(strided(p), "strided layouts (STRIDES)");
  add(p.softcap != 0, "a softcap (SOFTCAP)");
  const bool aligned = alignment_matters(p);
  add(aligned && p.align == Align::top_left,
      "top-left alignment where it differs from bottom-right (ALIGN_TOP_LEFT)");
  add(aligned && p.align == Align::bottom_right,
      "bottom-right alignment where it differs from top-left (ALIGN_BOTTOM_RIGHT)");
  add(p.scale != Problem::default_scale(p.dk), "a scale other than 1/sqrt(dk) (SCALE)");
  add(!p.sink.empty(), "sinks (SINK)");
  add(p.packed.has_value(), "packed sequences (PACKED)");
  add(p.paged.has_value(), "paged keys and values (PAGED_KV)");
  add(p.descale.has_value(), "descales (DESCALE)");
  return f;
}

}  // namespace attncheck
