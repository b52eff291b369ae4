// The layout of a saved fixture, so that a file reads like the
// specification and its tensors stay a line each.

#include "formats/pretty_json.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "core/fields.h"

namespace attncheck::formats {
namespace {

using nlohmann::json;

// The order fields are written in: the order SPEC section 5.3 lists them,
// so that a saved file reads like the specification. Others follow sorted.
// A problem's fields come in core/fields.h's order, each as the keys the
// file spells it by (window_left and window_right as one "window"); the
// version 2 fields follow the version 1 ones there, as SPEC 5.3 lists them
// (a version 1 file has none of them, and reads as before). Then the keys
// inside them (paged's, a mask's or bias's) and the fixture's own.
std::vector<std::string_view> field_order() {
  std::vector<std::string_view> order{"format"};
  const auto add = [&](std::string_view key) {
    if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
  };
  const Problem p;
  fields::for_each_problem_field(p, [&](const fields::Field& f, const auto&) {
    if (!f.in(fields::kJson)) return;
    for (std::string_view keys = f.json_as; !keys.empty();) {
      const size_t space = keys.find(' ');
      add(keys.substr(0, space));
      keys = space == std::string_view::npos ? std::string_view() : keys.substr(space + 1);
    }
  });
  for (std::string_view key : {"page_size", "num_pages", "block_table_stride", "block_table",
                               "seqlens_k", "shape", "data", "problem", "args", "expected",
                               "meta"}) {
    add(key);
  }
  return order;
}

size_t field_rank(std::string_view key) {
  static const std::vector<std::string_view> order = field_order();
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == key) return i;
  return order.size();
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
