#pragma once
// The "attncheck-problem-1" format (SPEC 5.3): a Problem as JSON. The
// reader and writer are declared in formats/json.h; a fixture holds a
// problem, and a problem file reads as a fixture.

#include <string_view>

namespace attncheck::formats {

/// The "format" of a problem file.
inline constexpr std::string_view kProblemFormat = "attncheck-problem-1";

}  // namespace attncheck::formats
