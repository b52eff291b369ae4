#include "properties/args.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "formats/json.h"

namespace attncheck {
namespace {

using nlohmann::json;

// A message fit for one line of stderr: control characters (a newline in
// a string the file gave) become '?'.
std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

}  // namespace

ArgsCheck::ArgsCheck(const json& args, const Problem& p,
                     std::initializer_list<std::string_view> keys)
    : args_(args), p_(p) {
  if (!args_.is_object()) return;
  for (const auto& [key, value] : args_.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      error(key, fmt::format("not an arg of this property (its args: {})",
                             fmt::join(std::vector<std::string_view>(keys), ", ")));
    }
  }
}

void refuse_args(const Fixture& f, std::string_view property) {
  if (!f.args.is_object() || f.args.empty()) return;
  throw InputError(one_line(fmt::format("field 'args.{}': {} takes no args",
                                        f.args.begin().key(), property)));
}

const json* ArgsCheck::find(std::string_view key) const {
  if (!args_.is_object()) return nullptr;
  const auto it = args_.find(key);
  return it == args_.end() ? nullptr : &*it;
}

void ArgsCheck::required(std::initializer_list<std::string_view> keys) const {
  for (std::string_view key : keys)
    if (!find(key)) error(key, "missing");
}

void ArgsCheck::error(std::string_view key, const std::string& what) const {
  throw InputError(one_line(fmt::format("field 'args.{}': {}", key, what)));
}

int64_t ArgsCheck::integer_in(std::string_view key, const json& v, int64_t lo, int64_t hi,
                              std::string_view what) const {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      error(key, fmt::format("integer {} is too large", u));
    }
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && v.get<double>() == std::trunc(v.get<double>()) &&
             std::fabs(v.get<double>()) < 9.0e15) {
    // Writers that only know doubles (JavaScript, some Python paths) may
    // write 2.0 for 2; accept those but nothing fractional.
    x = static_cast<int64_t>(v.get<double>());
  } else {
    error(key, fmt::format("expected an integer, got {}", json_brief(v)));
  }
  if (x < lo || x >= hi) error(key, fmt::format("{} {} is outside [{}, {})", what, x, lo, hi));
  return x;
}

namespace {

// `count` elements of `what`, or the error of `key`.
void expect_array(const ArgsCheck& a, std::string_view key, const json& v, int64_t count,
                  std::string_view what) {
  if (!v.is_array()) {
    a.error(key, fmt::format("expected an array of {} {}, got {}", count, what, json_type_name(v)));
  }
  if (static_cast<int64_t>(v.size()) != count) {
    a.error(key, fmt::format("expected {} {}, got {}", count, what, v.size()));
  }
}

}  // namespace

void ArgsCheck::row(std::string_view key) const {
  const json* v = find(key);
  if (!v) return;
  expect_array(*this, key, *v, 3, "integers [b, h, i]");
  integer_in(key, (*v)[0], 0, p_.batch, "b");
  integer_in(key, (*v)[1], 0, p_.heads, "h");
  integer_in(key, (*v)[2], 0, p_.tq, "i");
}

void ArgsCheck::permutation(std::string_view key, int64_t n, std::string_view dim) const {
  const json* v = find(key);
  if (!v) return;
  expect_array(*this, key, *v, n, fmt::format("indices (a permutation of 0..{}-1)", dim));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (const json& x : *v) {
    const int64_t i = integer_in(key, x, 0, n, "index");
    if (seen[static_cast<size_t>(i)]) {
      error(key, fmt::format("index {} appears twice: not a permutation", i));
    }
    seen[static_cast<size_t>(i)] = true;
  }
}

void ArgsCheck::finite_number(std::string_view key) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_number() || !std::isfinite(v->get<double>())) {
    error(key, fmt::format("expected a finite number, got {}", json_brief(*v)));
  }
}

void ArgsCheck::finite_numbers(std::string_view key, int64_t count) const {
  const json* v = find(key);
  if (!v) return;
  // The judges read them as doubles.
  expect_array(*this, key, *v, count, "finite numbers");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& x = (*v)[i];
    if (!x.is_number() || !std::isfinite(x.get<double>())) {
      error(key, fmt::format("element {}: expected a finite number, got {}", i, json_brief(x)));
    }
  }
}

void ArgsCheck::string(std::string_view key) const {
  const json* v = find(key);
  if (v && !v->is_string()) error(key, fmt::format("expected a string, got {}", json_brief(*v)));
}

void ArgsCheck::one_of(std::string_view key, std::initializer_list<std::string_view> names) const {
  const json* v = find(key);
  if (!v) return;
  string(key);
  const auto& s = v->get_ref<const std::string&>();
  for (std::string_view n : names)
    if (s == n) return;
  error(key, fmt::format("expected one of \"{}\", got \"{}\"", fmt::join(names, "\", \""), s));
}

void ArgsCheck::integer(std::string_view key, int64_t lo, int64_t hi,
                        std::string_view what) const {
  if (const json* v = find(key)) integer_in(key, *v, lo, hi, what);
}

int64_t ArgsCheck::elements(std::string_view key, std::initializer_list<int64_t> dims) const {
  constexpr int64_t limit = input_limits::kTensorElements;
  static_assert((limit & (limit - 1)) == 0, "the message states the limit as a power of two");
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 1 || d > limit || n > limit / d) {
      error(key, fmt::format("shape [{}] has more than the limit of 2^{} elements",
                             fmt::join(std::vector<int64_t>(dims), ", "),
                             std::countr_zero(static_cast<uint64_t>(limit))));
    }
    n *= d;
  }
  return n;
}

void validate_row_arg(const Fixture& f) {
  const ArgsCheck a(f.args, f.problem, {"row"});
  a.required({"row"});
  a.row("row");
}

}  // namespace attncheck
