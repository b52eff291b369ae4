#include "core/text.h"

#include <fmt/format.h>

namespace attncheck {

std::string printable(std::string_view s, size_t cap) {
  std::string out;
  out.reserve(std::min(s.size(), cap) + 16);
  size_t kept = 0;
  for (; kept < s.size() && out.size() < cap; ++kept) {
    const auto c = static_cast<unsigned char>(s[kept]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (kept < s.size()) out += fmt::format(" ... ({} characters)", s.size());
  return out;
}

}  // namespace attncheck
