#pragma once
// The layout of a saved fixture: fields in the order SPEC 5.3 lists them,
// arrays of plain values on one line.

#include <string>

#include <nlohmann/json.hpp>

namespace attncheck::formats {

/// `j` indented by one space per level, without a final newline: an
/// object's fields in SPEC 5.3's order (others after them, sorted), an
/// array of plain values (no non-empty array or object) on one line.
std::string pretty_json(const nlohmann::json& j);

}  // namespace attncheck::formats
