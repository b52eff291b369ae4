#pragma once
// The checked reading of one JSON object's fields, shared by the file
// formats: every error is an InputError "WHERE: field 'X': what" in one line,
// every field read is remembered so that an unknown (for instance
// misspelled) field is reported instead of silently ignored, and every size
// is held to input_limits before anything is allocated for it.

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"
#include "formats/json.h"

namespace attncheck::formats {

/// "2^20" for a power of two, the decimal otherwise: the limits read as
/// they are stated.
std::string power_of_two(int64_t x);

/// A message fit for one line of stderr: control characters (a newline in
/// a parser's "last read" excerpt) become '?'.
std::string one_line(std::string s);

/// The fields of one JSON object, read with their file and field named in
/// every error.
class Reader {
 public:
  /// Throws InputError "WHERE: expected a JSON object, got TYPE" unless `j`
  /// is an object. `j` must outlive the reader.
  Reader(const nlohmann::json& j, std::string where);

  /// Throws InputError with `message` made one line: a string the file
  /// gave (a format, a dtype name, ...) may decode to a "\r".
  [[noreturn]] static void fail(const std::string& message);

  /// Throws InputError "WHERE: field 'NAME': WHAT".
  [[noreturn]] void field_error(std::string_view name, const std::string& what) const;

  /// The file (and the enclosing fields) every message starts with.
  const std::string& where() const { return where_; }

  /// The field, or nullptr when it is absent or null; marks it read.
  const nlohmann::json* optional(std::string_view name);

  /// The field; "missing" when it is absent or null.
  const nlohmann::json& required(std::string_view name);

  /// `v` (the value of field `name`) as an integer; 2.0 is accepted for 2,
  /// nothing fractional and nothing beyond int64.
  int64_t integer(std::string_view name, const nlohmann::json& v) const;

  /// The required field `name` as a dimension: 1 to input_limits::kDim.
  int64_t dimension(std::string_view name);

  /// `v` (the value of field `name`) as a string.
  std::string string(std::string_view name, const nlohmann::json& v) const;

  /// `v` as an array of exactly `count` elements, `what` naming them in the
  /// message otherwise.
  const nlohmann::json& array(std::string_view name, const nlohmann::json& v, int64_t count,
                              std::string_view what) const;

  /// `count` doubles (number_from_json), each representable in `dtype`, and
  /// finite if asked. `v` may be an array or a tensor parse_json packed
  /// (kPackedNumbers), which is read once: its bytes are emptied.
  std::vector<double> numbers(std::string_view name, const nlohmann::json& v, int64_t count,
                              DType dtype, bool finite) const;

  /// `count` flags, each 0 or 1 (true and false are accepted as well).
  std::vector<uint8_t> flags(std::string_view name, const nlohmann::json& v,
                             int64_t count) const;

  /// Throws for the first field of the object that was never read.
  void reject_unknown_fields() const;

 private:
  std::vector<double> unpacked(std::string_view name, const nlohmann::json& v, int64_t count) const;

  const nlohmann::json& j_;
  std::string where_;
  std::set<std::string, std::less<>> used_;
};

/// Element count of a shape, refusing (as an error of field `name`) a dim
/// below 1 or more than `limit` elements before any product can overflow.
int64_t element_count(const Reader& r, std::string_view name, std::initializer_list<int64_t> dims,
                      int64_t limit = input_limits::kTensorElements);

/// Reads the required field "format" and checks it is `expected`.
void check_format(Reader& r, std::string_view expected);

/// Each double as number_to_json writes it.
nlohmann::json numbers_to_json(const std::vector<double>& xs);

}  // namespace attncheck::formats
