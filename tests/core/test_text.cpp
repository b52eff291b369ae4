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

}  // namespace
}  // namespace attncheck
