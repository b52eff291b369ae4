#include "core/text.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace attncheck {

size_t utf8_sequence(std::string_view s, size_t i, char32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
  char32_t c = b0 & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (byte(k) & 0x3f);
  *cp = c;
  return n;
}

namespace {

// C1 controls and the characters that change the display order of text
// around them (Unicode's bidirectional formatting characters).
bool hidden_control(char32_t c) {
  return (c >= 0x80 && c <= 0x9f) || c == 0x061c || c == 0x200e || c == 0x200f ||
         (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

}  // namespace

std::string printable(std::string_view s, size_t cap) {
  std::string out;
  out.reserve(std::min(s.size(), cap) + 16);
  size_t kept = 0;
  while (kept < s.size() && out.size() < cap) {
    const auto c = static_cast<unsigned char>(s[kept]);
    char32_t cp = 0;
    const size_t n = utf8_sequence(s, kept, &cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++kept;
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (hidden_control(cp)) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      out.append(s.substr(kept, n));
    }
    kept += n;
  }
  if (kept < s.size()) out += fmt::format(" ... ({} characters)", s.size());
  return out;
}

std::string utf8_escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    if (const size_t n = utf8_sequence(s, i, &cp); n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i]));
      ++i;
    }
  }
  return out;
}

std::string shell_word(std::string_view s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 ||
           std::string_view("_./:=+-,@%").find(static_cast<char>(c)) != std::string_view::npos;
  });
  if (plain) return std::string(s);
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace attncheck
