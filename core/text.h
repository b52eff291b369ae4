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

/// The length of the well-formed UTF-8 sequence starting at s[i] (Unicode
/// 15, table 3-7: no overlong forms, no surrogates, nothing above
/// U+10FFFF), its code point in *cp; 0 when the byte there starts none.
size_t utf8_sequence(std::string_view s, size_t i, char32_t* cp);

/// `s` with control characters escaped (newline as \n, tab as \t, other C0
/// characters and DEL as \xHH: an ESC from a plugin never reaches the
/// terminal raw; C1 controls and the bidirectional formatting characters,
/// which reorder what a terminal shows, as \uHHHH) and every byte that is
/// not part of well-formed UTF-8 as \xHH, so the result is valid UTF-8 (a
/// JSON report can always hold it); cut to `cap` characters, with
/// " ... (N characters)" stating the full length.
std::string printable(std::string_view s, size_t cap = kForeignTextChars);

/// `s` as valid UTF-8, whole: each byte that is not part of a well-formed
/// UTF-8 sequence (a Latin-1 file name, a truncated sequence) written as
/// \xHH, everything else unchanged. For foreign text that must stay
/// complete (a plugin's path in a report), where printable() would cut it.
std::string utf8_escaped(std::string_view s);

/// `s` as one word of a shell command line (a printed reproduce or rerun
/// line): as it is when it holds only letters, digits and _./:=+-,@%,
/// else in single quotes, each ' as '\''.
std::string shell_word(std::string_view s);

}  // namespace attncheck
