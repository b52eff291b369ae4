// The layout of a saved fixture, so that a file reads like the
// specification and its tensors stay a line each.

#include "formats/pretty_json.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

namespace attncheck::formats {
namespace {

using nlohmann::json;

// The order fields are written in: the order SPEC section 5.3 lists them,
// so that a saved file reads like the specification. Others follow sorted.
// The version 2 fields follow the version 1 ones, as SPEC 5.3 lists them
// (a version 1 file has none of them, and reads as before).
constexpr std::array<std::string_view, 39> kFieldOrder{
    "format",       "dtype",        "batch",     "heads",     "kv_heads",
    "tq",           "tk",           "dk",        "dv",        "q",
    "k",            "v",            "key_valid", "mask",      "bias",
    "causal",       "align",        "window",    "scale",     "softcap",
    "dout",         "q_dtype",      "kv_dtype",  "descale",   "sink",
    "cu_seqlens_q", "cu_seqlens_k", "paged",     "page_size", "num_pages",
    "block_table_stride", "block_table", "seqlens_k", "shape", "data",
    "problem",      "args",         "expected",  "meta"};

size_t field_rank(std::string_view key) {
  for (size_t i = 0; i < kFieldOrder.size(); ++i)
    if (kFieldOrder[i] == key) return i;
  return kFieldOrder.size();
}

void write_pretty(std::string& out, const json& j, int indent) {
  const std::string pad(static_cast<size_t>(indent + 1), ' ');
  const std::string close_pad(static_cast<size_t>(indent), ' ');
  if (j.is_object() && !j.empty()) {
    std::vector<std::string> keys;
    for (const auto& item : j.items()) keys.push_back(item.key());
    std::stable_sort(keys.begin(), keys.end(),
                     [](const auto& a, const auto& b) {
                       return field_rank(a) < field_rank(b);
                     });
    out += "{\n";
    for (size_t i = 0; i < keys.size(); ++i) {
      out += pad + json(keys[i]).dump() + ": ";
      write_pretty(out, j.at(keys[i]), indent + 1);
      out += i + 1 < keys.size() ? ",\n" : "\n";
    }
    out += close_pad + "}";
    return;
  }
  if (j.is_array() && !j.empty()) {
    const bool flat = std::none_of(j.begin(), j.end(), [](const json& x) {
      return x.is_structured() && !x.empty();
    });
    if (flat) {
      out += "[";
      for (size_t i = 0; i < j.size(); ++i)
        out += (i ? ", " : "") + j[i].dump();
      out += "]";
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      out += pad;
      write_pretty(out, j[i], indent + 1);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out += close_pad + "]";
    return;
  }
  out += j.dump();
}

}  // namespace

std::string pretty_json(const json& j) {
  std::string out;
  write_pretty(out, j, 0);
  return out;
}

}  // namespace attncheck::formats
