#pragma once
// Foreign text (a plugin's error message or name, an exception from an
// implementation, a string field of an input file) made safe to print: one
// line, no control characters reaching the terminal, bounded length.

#include <cstddef>
#include <string>
#include <string_view>

namespace attncheck {

/// Characters of foreign text kept in a message; the rest is replaced by a
/// note of the full length. A few hundred: enough for any real error
/// message, and a 10 MB field cannot become a 10 MB line.
inline constexpr size_t kForeignTextChars = 300;

/// `s` with control characters escaped (newline as \n, tab as \t, others
/// as \xHH: an ESC from a plugin never reaches the terminal raw) and cut to
/// `cap` characters, with " ... (N characters)" stating the full length.
std::string printable(std::string_view s, size_t cap = kForeignTextChars);

}  // namespace attncheck
