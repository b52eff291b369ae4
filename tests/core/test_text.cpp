// Foreign text made printable: control characters escaped, length capped.

#include <gtest/gtest.h>

#include "core/text.h"

namespace attncheck {
namespace {

TEST(Text, ControlCharactersAreEscaped) {
  EXPECT_EQ(printable("two\nlines\tand \x1b[31mred"), "two\\nlines\\tand \\x1b[31mred");
  EXPECT_EQ(printable("plain"), "plain");
}

TEST(Text, LongTextIsCutWithItsLengthStated) {
  const std::string big(10'000'000, 'x');
  const std::string p = printable(big);
  EXPECT_EQ(p, std::string(kForeignTextChars, 'x') + " ... (10000000 characters)");
  EXPECT_EQ(printable("abcdef", 3), "abc ... (6 characters)");
}

TEST(Text, InvalidUtf8IsEscapedByteByByte) {
  // A Latin-1 byte, a lone continuation byte, a truncated sequence, an
  // overlong NUL, a surrogate: each byte as \\xHH; valid text kept.
  EXPECT_EQ(printable("caf\xe9"), "caf\\xe9");
  EXPECT_EQ(printable("a\x80" "b"), "a\\x80b");
  EXPECT_EQ(printable("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(printable("\xc0\x80"), "\\xc0\\x80");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(utf8_escaped("caf\xe9.so"), "caf\\xe9.so");
  EXPECT_EQ(utf8_escaped("line\nkept\xc3\xa9"), "line\nkept\xc3\xa9");
}

TEST(Text, C1AndBidiControlsAreEscaped) {
  EXPECT_EQ(printable("a\xc2\x85" "b"), "a\\u0085b");
  EXPECT_EQ(printable("\xe2\x80\xae" "evil"), "\\u202eevil");
  EXPECT_EQ(printable("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069");
  EXPECT_EQ(printable("\xd8\x9c"), "\\u061c");
}

}  // namespace
}  // namespace attncheck

namespace attncheck {
namespace {

TEST(ShellWord, QuotesOnlyWhatAShellWouldSplitOrExpand) {
  EXPECT_EQ(shell_word("attncheck-failures/x-f64-MatchesOracle.json"),
            "attncheck-failures/x-f64-MatchesOracle.json");
  EXPECT_EQ(shell_word("/tmp/run dir/x.json"), "'/tmp/run dir/x.json'");
  EXPECT_EQ(shell_word("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_word("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_word(""), "''");
}

}  // namespace
}  // namespace attncheck
