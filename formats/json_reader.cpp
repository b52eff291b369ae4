// The checked field readers every file format reads its objects with, and
// the JSON spelling of a double (numbers round-trip bit-exactly, non-finite
// ones as strings).

#include "formats/json_reader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attncheck/dtype.h"
#include "formats/json.h"

namespace attncheck {

using nlohmann::json;

// dump() without indentation escapes newlines; long values are cut.
std::string json_brief(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string json_type_name(const json& j) {
  return j.is_number() ? "number" : std::string(j.type_name());
}

json number_to_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // nlohmann prints the shortest decimal that reads back to the same double
  // (and keeps the sign of -0.0), so finite values round-trip bit-exactly.
  return x;
}

double number_from_json(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  throw InputError(
      fmt::format("{}: expected a number or \"inf\", \"-inf\", \"nan\", got {}",
                  where, json_brief(j)));
}

namespace formats {

std::string power_of_two(int64_t x) {
  int e = 0;
  while ((int64_t{1} << e) < x) ++e;
  return (int64_t{1} << e) == x ? fmt::format("2^{}", e) : std::to_string(x);
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

Reader::Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
  if (!j_.is_object()) {
    fail(fmt::format("{}: expected a JSON object, got {}", where_, json_type_name(j_)));
  }
}

void Reader::fail(const std::string& message) { throw InputError(one_line(message)); }

void Reader::field_error(std::string_view name, const std::string& what) const {
  fail(fmt::format("{}: field '{}': {}", where_, name, what));
}

const json* Reader::optional(std::string_view name) {
  used_.insert(std::string(name));
  const auto it = j_.find(name);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& Reader::required(std::string_view name) {
  const json* v = optional(name);
  if (v == nullptr) field_error(name, "missing");
  return *v;
}

int64_t Reader::integer(std::string_view name, const json& v) const {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      field_error(name, fmt::format("integer {} is too large", u));
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  // Writers that only know doubles (JavaScript, some Python paths) may
  // write 2.0 for 2; accept those but nothing fractional.
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (x == std::trunc(x) && std::fabs(x) < 9.0e15) return static_cast<int64_t>(x);
  }
  field_error(name, fmt::format("expected an integer, got {}", json_brief(v)));
}

int64_t Reader::dimension(std::string_view name) {
  const int64_t x = integer(name, required(name));
  if (x < 1) field_error(name, fmt::format("must be >= 1, got {}", x));
  if (x > input_limits::kDim) {
    field_error(name, fmt::format("{} is larger than the limit {}", x,
                                  power_of_two(input_limits::kDim)));
  }
  return x;
}

std::string Reader::string(std::string_view name, const json& v) const {
  if (!v.is_string()) {
    field_error(name, fmt::format("expected a string, got {}", json_brief(v)));
  }
  return v.get<std::string>();
}

const json& Reader::array(std::string_view name, const json& v, int64_t count,
                          std::string_view what) const {
  if (!v.is_array()) {
    field_error(name, fmt::format("expected an array of {} {}, got {}", count, what,
                                  json_type_name(v)));
  }
  if (static_cast<int64_t>(v.size()) != count) {
    field_error(name, fmt::format("expected {} {}, got {}", count, what, v.size()));
  }
  return v;
}

// A tensor parse_json packed: its doubles, the bytes emptied (the DOM is
// read once, and a large tensor is then in memory once, not twice).
std::vector<double> Reader::unpacked(std::string_view name, const json& v, int64_t count) const {
  // The DOM parse_json returned is the caller's, not const: emptying the
  // bytes changes no value a reader would read again.
  auto& bytes = const_cast<json&>(v).get_binary();
  const auto n = static_cast<int64_t>(bytes.size() / sizeof(double));
  if (n != count) field_error(name, fmt::format("expected {} numbers, got {}", count, n));
  // Slice by slice through a small buffer, into room reserved but not
  // zeroed, each slice's pages of the bytes given back once copied (they
  // are discarded after): a tensor of 512 MiB is then in memory once at
  // the peak, not twice. MADV_DONTNEED on private anonymous memory only
  // drops pages this function never reads again.
  constexpr size_t kSlice = size_t{1} << 24;
  std::vector<double> out;
  out.reserve(static_cast<size_t>(n));
  std::vector<double> slice(std::min(kSlice, bytes.size()) / sizeof(double));
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  uint8_t* const base = bytes.data();
  for (size_t at = 0; at < bytes.size(); at += kSlice) {
    const size_t len = std::min(kSlice, bytes.size() - at);
    std::memcpy(slice.data(), base + at, len);
    const auto count = static_cast<ptrdiff_t>(len / sizeof(double));
    out.insert(out.end(), slice.begin(), slice.begin() + count);
    const auto first = (reinterpret_cast<uintptr_t>(base) + at + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(base) + at + len) / page * page;
    if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  }
  std::vector<uint8_t>().swap(bytes);
  return out;
}

std::vector<double> Reader::numbers(std::string_view name, const json& v, int64_t count,
                                    DType dtype, bool finite) const {
  const bool packed = v.is_binary() && v.get_binary().has_subtype() &&
                      v.get_binary().subtype() == kPackedNumbers;
  std::vector<double> out;
  if (packed) {
    out = unpacked(name, v, count);
  } else {
    const json& a = array(name, v, count, "numbers");
    out.reserve(a.size());
    for (size_t idx = 0; idx < a.size(); ++idx) {
      // The place is formatted only for an element that is no number.
      const json& x = a[idx];
      out.push_back(x.is_number() ? x.get<double>()
                                  : number_from_json(x, fmt::format("{}: field '{}': element {}",
                                                                    where_, name, idx)));
    }
  }
  for (size_t idx = 0; idx < out.size(); ++idx) {
    const double x = out[idx];
    if (finite && !std::isfinite(x)) {
      field_error(name, fmt::format("element {}: value {} is not finite", idx, x));
    }
    // Block formats' values are checked a block at a time, by
    // Problem::validate (one value alone has no format there).
    if (!is_block_format(dtype) && !representable(dtype, x)) {
      field_error(name, fmt::format("element {}: value {} is not representable in {}", idx, x,
                                    dtype_name(dtype)));
    }
  }
  return out;
}

std::vector<uint8_t> Reader::flags(std::string_view name, const json& v, int64_t count) const {
  const json& a = array(name, v, count, "entries of 0 or 1");
  std::vector<uint8_t> out;
  out.reserve(a.size());
  for (size_t idx = 0; idx < a.size(); ++idx) {
    const json& x = a[idx];
    if (x.is_boolean()) {
      out.push_back(x.get<bool>() ? 1 : 0);
    } else if (x.is_number_integer() && (x == 0 || x == 1)) {
      out.push_back(x.get<int64_t>() == 1 ? 1 : 0);
    } else {
      field_error(name, fmt::format("element {}: expected 0 or 1, got {}", idx, json_brief(x)));
    }
  }
  return out;
}

void Reader::reject_unknown_fields() const {
  for (const auto& item : j_.items()) {
    if (!used_.count(item.key())) {
      fail(fmt::format("{}: field '{}': unknown field", where_, item.key()));
    }
  }
}

int64_t element_count(const Reader& r, std::string_view name,
                      std::initializer_list<int64_t> dims, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 1 || d > limit || n > limit / d) {
      std::vector<int64_t> shape(dims);
      r.field_error(name, fmt::format("shape [{}] has more than the limit of {} elements",
                                      fmt::join(shape, ", "), power_of_two(limit)));
    }
    n *= d;
  }
  return n;
}

void check_format(Reader& r, std::string_view expected) {
  const std::string f = r.string("format", r.required("format"));
  if (f != expected) {
    r.field_error("format", fmt::format("expected \"{}\", got \"{}\"", expected, f));
  }
}

json numbers_to_json(const std::vector<double>& xs) {
  json a = json::array();
  for (double x : xs) a.push_back(number_to_json(x));
  return a;
}

}  // namespace formats
}  // namespace attncheck
