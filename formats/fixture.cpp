#include "attncheck/fixture.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attncheck/error.h"

namespace attncheck {

// dump() without indentation escapes newlines; long values are cut.
std::string json_brief(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string json_type_name(const nlohmann::json& j) {
  return j.is_number() ? "number" : std::string(j.type_name());
}

namespace {

using nlohmann::json;

constexpr std::string_view kProblemFormat = "attncheck-problem-1";
constexpr std::string_view kFixtureFormat = "attncheck-fixture-1";
constexpr std::string_view kOracleFormat = "attncheck-oracle-1";

namespace limits = input_limits;

// "2^20" for a power of two: the limits read as they are stated.
std::string power_of_two(int64_t x) {
  int e = 0;
  while ((int64_t{1} << e) < x) ++e;
  return (int64_t{1} << e) == x ? fmt::format("2^{}", e) : std::to_string(x);
}

// A message fit for one line of stderr: control characters (a newline in
// a parser's "last read" excerpt) become '?'.
std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

// Refuses nesting deeper than limits::kJsonDepth before nlohmann parses
// (and later prints and frees) the value recursively. Brackets inside
// strings do not count.
void check_depth(std::string_view text, const std::string& where) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kJsonDepth) {
        throw InputError(fmt::format(
            "{}: not valid JSON: arrays and objects nested deeper than {}",
            where, limits::kJsonDepth));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string brief(const json& j) { return json_brief(j); }
std::string type_name(const json& j) { return json_type_name(j); }

// Reads the fields of one JSON object, naming the file and the field in
// every error, and remembers which fields were read so that unknown (for
// instance misspelled) fields are reported instead of silently ignored.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) {
      fail(fmt::format("{}: expected a JSON object, got {}", where_,
                       type_name(j_)));
    }
  }

  // Every message is one line, whatever a string the file gave (a format,
  // a dtype name, ...) decoded to: a "\r" escape is a carriage return.
  [[noreturn]] static void fail(const std::string& message) {
    throw InputError(one_line(message));
  }

  [[noreturn]] void field_error(std::string_view name,
                                const std::string& what) const {
    fail(fmt::format("{}: field '{}': {}", where_, name, what));
  }

  const std::string& where() const { return where_; }

  // The field, or nullptr when it is absent or null.
  const json* optional(std::string_view name) {
    used_.insert(std::string(name));
    const auto it = j_.find(name);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const json& required(std::string_view name) {
    const json* v = optional(name);
    if (v == nullptr) field_error(name, "missing");
    return *v;
  }

  int64_t integer(std::string_view name, const json& v) const {
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
      if (x == std::trunc(x) && std::fabs(x) < 9.0e15)
        return static_cast<int64_t>(x);
    }
    field_error(name, fmt::format("expected an integer, got {}", brief(v)));
  }

  int64_t dimension(std::string_view name) {
    const int64_t x = integer(name, required(name));
    if (x < 1) field_error(name, fmt::format("must be >= 1, got {}", x));
    if (x > limits::kDim) {
      field_error(name, fmt::format("{} is larger than the limit {}", x,
                                    power_of_two(limits::kDim)));
    }
    return x;
  }

  std::string string(std::string_view name, const json& v) const {
    if (!v.is_string()) {
      field_error(name, fmt::format("expected a string, got {}", brief(v)));
    }
    return v.get<std::string>();
  }

  const json& array(std::string_view name, const json& v, int64_t count,
                    std::string_view what) const {
    if (!v.is_array()) {
      field_error(name, fmt::format("expected an array of {} {}, got {}", count,
                                    what, type_name(v)));
    }
    if (static_cast<int64_t>(v.size()) != count) {
      field_error(name,
                  fmt::format("expected {} {}, got {}", count, what, v.size()));
    }
    return v;
  }

  // `count` doubles, each representable in `dtype` (and finite if asked).
  std::vector<double> numbers(std::string_view name, const json& v,
                              int64_t count, DType dtype, bool finite) const {
    const json& a = array(name, v, count, "numbers");
    std::vector<double> out;
    out.reserve(a.size());
    for (size_t idx = 0; idx < a.size(); ++idx) {
      const double x = number_from_json(
          a[idx], fmt::format("{}: field '{}': element {}", where_, name, idx));
      if (finite && !std::isfinite(x)) {
        field_error(name,
                    fmt::format("element {}: value {} is not finite", idx, x));
      }
      if (!representable(dtype, x)) {
        field_error(
            name, fmt::format("element {}: value {} is not representable in {}",
                              idx, x, dtype_name(dtype)));
      }
      out.push_back(x);
    }
    return out;
  }

  // `count` flags, each 0 or 1 (true and false are accepted as well).
  std::vector<uint8_t> flags(std::string_view name, const json& v,
                             int64_t count) const {
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
        field_error(name, fmt::format("element {}: expected 0 or 1, got {}",
                                      idx, brief(x)));
      }
    }
    return out;
  }

  void reject_unknown_fields() const {
    for (const auto& item : j_.items()) {
      if (!used_.count(item.key())) {
        fail(fmt::format("{}: field '{}': unknown field", where_, item.key()));
      }
    }
  }

 private:
  const json& j_;
  std::string where_;
  std::set<std::string, std::less<>> used_;
};

// Element count of a shape (every dim >= 1), refusing more than `limit`
// elements before any product can overflow.
int64_t element_count(const Reader& r, std::string_view name,
                      std::initializer_list<int64_t> dims,
                      int64_t limit = limits::kTensorElements) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 1 || d > limit || n > limit / d) {
      std::vector<int64_t> shape(dims);
      r.field_error(name, fmt::format("shape [{}] has more than the limit of "
                                      "{} elements",
                                      fmt::join(shape, ", "),
                                      power_of_two(limit)));
    }
    n *= d;
  }
  return n;
}

// Reads the {"shape": [B|1, H|1, tq, tk], "data": [...]} of a mask or bias.
template <typename T, typename ReadData>
Broadcast<T> read_broadcast(Reader& r, std::string_view name, const json& v,
                            const Problem& p, ReadData read_data) {
  Reader inner(v, fmt::format("{}: field '{}'", r.where(), name));
  const json& shape =
      inner.array("shape", inner.required("shape"), 4, "integers");
  std::array<int64_t, 4> dims{};
  for (size_t k = 0; k < 4; ++k) dims[k] = inner.integer("shape", shape[k]);
  const bool ok = (dims[0] == 1 || dims[0] == p.batch) &&
                  (dims[1] == 1 || dims[1] == p.heads) && dims[2] == p.tq &&
                  dims[3] == p.tk;
  if (!ok) {
    auto either = [](int64_t n) {
      return n == 1 ? std::string("1") : fmt::format("1|{}", n);
    };
    inner.field_error(
        "shape",
        fmt::format("expected [{}, {}, {}, {}] ([B|1, H|1, tq, tk]), got "
                    "[{}, {}, {}, {}]",
                    either(p.batch), either(p.heads), p.tq, p.tk, dims[0],
                    dims[1], dims[2], dims[3]));
  }
  Broadcast<T> out;
  out.batch = dims[0];
  out.heads = dims[1];
  out.data =
      read_data(inner, inner.required("data"),
                element_count(inner, "data", {dims[0], dims[1], p.tq, p.tk}));
  inner.reject_unknown_fields();
  return out;
}

// The logical [d0][d1][d2][d3] values of a strided tensor, row-major.
json tensor_to_json(const Tensor& t, int64_t d0, int64_t d1, int64_t d2,
                    int64_t d3) {
  json a = json::array();
  for (int64_t i0 = 0; i0 < d0; ++i0)
    for (int64_t i1 = 0; i1 < d1; ++i1)
      for (int64_t i2 = 0; i2 < d2; ++i2)
        for (int64_t i3 = 0; i3 < d3; ++i3)
          a.push_back(number_to_json(t.at(i0, i1, i2, i3)));
  return a;
}

json numbers_to_json(const std::vector<double>& xs) {
  json a = json::array();
  for (double x : xs) a.push_back(number_to_json(x));
  return a;
}

template <typename T, typename Convert>
json broadcast_to_json(const Broadcast<T>& x, const Problem& p,
                       Convert convert) {
  json data = json::array();
  for (const T& v : x.data) data.push_back(convert(v));
  return json{{"shape", {x.batch, x.heads, p.tq, p.tk}},
              {"data", std::move(data)}};
}

// nlohmann writes a non-finite double as null, which would not read back;
// replace such numbers anywhere inside free-form args/expected/meta.
json sanitized(const json& j) {
  if (j.is_number_float()) return number_to_json(j.get<double>());
  if (j.is_array() || j.is_object()) {
    json out = j;
    for (auto& item : out) item = sanitized(item);
    return out;
  }
  return j;
}

void check_format(Reader& r, std::string_view expected) {
  const std::string f = r.string("format", r.required("format"));
  if (f != expected) {
    r.field_error("format",
                  fmt::format("expected \"{}\", got \"{}\"", expected, f));
  }
}

// Problem::validate() says "name: what"; file errors say "field 'name': what".
std::string as_field_message(std::string_view message) {
  const size_t colon = message.find(": ");
  const std::string_view name = message.substr(0, colon);
  const bool identifier =
      colon != std::string_view::npos && !name.empty() &&
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") ==
          std::string_view::npos;
  if (!identifier) return std::string(message);
  return fmt::format("field '{}': {}", name, message.substr(colon + 2));
}

// The order fields are written in: the order SPEC section 5.3 lists them,
// so that a saved file reads like the specification. Others follow sorted.
constexpr std::array<std::string_view, 27> kFieldOrder{
    "format", "dtype",  "batch",   "heads",  "kv_heads", "tq",        "tk",
    "dk",     "dv",     "q",       "k",      "v",        "key_valid", "mask",
    "bias",   "causal", "align",   "window", "scale",    "softcap",   "dout",
    "shape",  "data",   "problem", "args",   "expected", "meta"};

size_t field_rank(std::string_view key) {
  for (size_t i = 0; i < kFieldOrder.size(); ++i)
    if (kFieldOrder[i] == key) return i;
  return kFieldOrder.size();
}

// Pretty JSON with arrays of plain values on one line: a fixture's tensors
// stay a line each instead of one number per line.
void write_pretty(std::string& out, const json& j, int indent) {
  const std::string pad(static_cast<size_t>(indent + 1), ' ');
  const std::string close_pad(static_cast<size_t>(indent), ' ');
  if (j.is_object() && !j.empty()) {
    std::vector<std::string> keys;
    for (const auto& item : j.items()) keys.push_back(item.key());
    std::stable_sort(keys.begin(), keys.end(),
                     [](const auto& a, const auto& b) {
                       return field_rank(a) < field_rank(b);
                     });
    out += "{\n";
    for (size_t i = 0; i < keys.size(); ++i) {
      out += pad + json(keys[i]).dump() + ": ";
      write_pretty(out, j.at(keys[i]), indent + 1);
      out += i + 1 < keys.size() ? ",\n" : "\n";
    }
    out += close_pad + "}";
    return;
  }
  if (j.is_array() && !j.empty()) {
    const bool flat = std::none_of(j.begin(), j.end(), [](const json& x) {
      return x.is_structured() && !x.empty();
    });
    if (flat) {
      out += "[";
      for (size_t i = 0; i < j.size(); ++i)
        out += (i ? ", " : "") + j[i].dump();
      out += "]";
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      out += pad;
      write_pretty(out, j[i], indent + 1);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out += close_pad + "]";
    return;
  }
  out += j.dump();
}

}  // namespace

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
                  where, brief(j)));
}

json problem_to_json(const Problem& p) {
  json j;
  j["format"] = std::string(kProblemFormat);
  j["dtype"] = std::string(dtype_name(p.dtype));
  j["batch"] = p.batch;
  j["heads"] = p.heads;
  j["kv_heads"] = p.kv_heads;
  j["tq"] = p.tq;
  j["tk"] = p.tk;
  j["dk"] = p.dk;
  j["dv"] = p.dv;
  j["q"] = tensor_to_json(p.q, p.batch, p.heads, p.tq, p.dk);
  j["k"] = tensor_to_json(p.k, p.batch, p.kv_heads, p.tk, p.dk);
  j["v"] = tensor_to_json(p.v, p.batch, p.kv_heads, p.tk, p.dv);
  j["key_valid"] = p.key_valid.empty() ? json(nullptr) : json(p.key_valid);
  j["mask"] =
      p.mask ? broadcast_to_json(*p.mask, p, [](uint8_t x) { return json(x); })
             : json(nullptr);
  j["bias"] =
      p.bias ? broadcast_to_json(*p.bias, p, number_to_json) : json(nullptr);
  j["causal"] = p.causal;
  j["align"] = p.align == Align::top_left ? "top_left" : "bottom_right";
  j["window"] = {p.window_left, p.window_right};
  j["scale"] = number_to_json(p.scale);
  j["softcap"] = number_to_json(p.softcap);
  j["dout"] = p.dout.empty() ? json(nullptr) : numbers_to_json(p.dout);
  return j;
}

Problem problem_from_json(const json& j, const std::string& where) {
  Reader r(j, where);
  check_format(r, kProblemFormat);
  Problem p;
  {
    const std::string name = r.string("dtype", r.required("dtype"));
    try {
      p.dtype = parse_dtype(name);
    } catch (const std::exception&) {
      r.field_error("dtype",
                    fmt::format("unknown dtype \"{}\" (expected f64, f32, "
                                "bf16 or f16)",
                                name));
    }
  }
  p.batch = r.dimension("batch");
  p.heads = r.dimension("heads");
  p.kv_heads = r.optional("kv_heads") ? r.dimension("kv_heads") : p.heads;
  if (p.heads % p.kv_heads != 0) {
    r.field_error("kv_heads", fmt::format("{} does not divide heads = {}",
                                          p.kv_heads, p.heads));
  }
  p.tq = r.dimension("tq");
  p.tk = r.dimension("tk");
  p.dk = r.dimension("dk");
  p.dv = r.dimension("dv");
  // Every consumer stores a score per (b, h, i, j): refuse a problem whose
  // scores alone would not fit, before reading its tensors.
  if (p.batch > limits::kScores / p.heads ||
      p.batch * p.heads > limits::kScores / p.tq ||
      p.batch * p.heads * p.tq > limits::kScores / p.tk) {
    r.field_error("tk", fmt::format("batch * heads * tq * tk = {} * {} * {} * "
                                    "{} scores is more than the limit {}",
                                    p.batch, p.heads, p.tq, p.tk,
                                    power_of_two(limits::kScores)));
  }

  auto tensor = [&](std::string_view name, int64_t h, int64_t t, int64_t d) {
    Tensor out;
    out.data =
        r.numbers(name, r.required(name),
                  element_count(r, name, {p.batch, h, t, d}), p.dtype, false);
    out.strides = contiguous_strides(p.batch, h, t, d);
    return out;
  };
  p.q = tensor("q", p.heads, p.tq, p.dk);
  p.k = tensor("k", p.kv_heads, p.tk, p.dk);
  p.v = tensor("v", p.kv_heads, p.tk, p.dv);

  if (const json* v = r.optional("key_valid")) {
    p.key_valid = r.flags("key_valid", *v,
                          element_count(r, "key_valid", {p.batch, p.tk}));
  }
  if (const json* v = r.optional("mask")) {
    p.mask = read_broadcast<uint8_t>(
        r, "mask", *v, p, [](Reader& in, const json& data, int64_t count) {
          return in.flags("data", data, count);
        });
  }
  if (const json* v = r.optional("bias")) {
    const DType dtype = p.dtype;
    p.bias = read_broadcast<double>(
        r, "bias", *v, p, [dtype](Reader& in, const json& data, int64_t count) {
          return in.numbers("data", data, count, dtype, true);
        });
  }
  if (const json* v = r.optional("causal")) {
    if (!v->is_boolean()) {
      r.field_error("causal",
                    fmt::format("expected true or false, got {}", brief(*v)));
    }
    p.causal = v->get<bool>();
  }
  if (const json* v = r.optional("align")) {
    const std::string a = r.string("align", *v);
    if (a == "top_left") {
      p.align = Align::top_left;
    } else if (a == "bottom_right") {
      p.align = Align::bottom_right;
    } else {
      r.field_error("align",
                    fmt::format("expected \"top_left\" or \"bottom_right\", "
                                "got \"{}\"",
                                a));
    }
  }
  if (const json* v = r.optional("window")) {
    const json& w = r.array("window", *v, 2, "integers [left, right]");
    p.window_left = r.integer("window", w[0]);
    p.window_right = r.integer("window", w[1]);
    if (p.window_left < -1 || p.window_right < -1) {
      r.field_error("window", "bounds must be >= -1 (-1 = unbounded)");
    }
    if (p.window_left > limits::kWindow || p.window_right > limits::kWindow) {
      r.field_error("window", fmt::format("bounds must be at most {}",
                                          power_of_two(limits::kWindow)));
    }
  }
  p.scale = Problem::default_scale(p.dk);
  if (const json* v = r.optional("scale")) {
    p.scale = number_from_json(*v, fmt::format("{}: field 'scale'", where));
    if (!std::isfinite(p.scale)) r.field_error("scale", "must be finite");
  }
  if (const json* v = r.optional("softcap")) {
    p.softcap = number_from_json(*v, fmt::format("{}: field 'softcap'", where));
    if (!std::isfinite(p.softcap) || p.softcap < 0) {
      r.field_error(
          "softcap",
          fmt::format("must be finite and >= 0 (0 = off), got {}", p.softcap));
    }
  }
  if (const json* v = r.optional("dout")) {
    p.dout = r.numbers("dout", *v,
                       element_count(r, "dout", {p.batch, p.heads, p.tq, p.dv}),
                       p.dtype, false);
  }
  r.reject_unknown_fields();

  try {
    p.validate();
  } catch (const std::exception& e) {
    throw InputError(
        one_line(fmt::format("{}: {}", where, as_field_message(e.what()))));
  }
  return p;
}

json fixture_to_json(const Fixture& f) {
  return json{{"format", std::string(kFixtureFormat)},
              {"problem", problem_to_json(f.problem)},
              {"args", sanitized(f.args)},
              {"expected", sanitized(f.expected)},
              {"meta", sanitized(f.meta)}};
}

json parse_json(std::string_view text, const std::string& where) {
  if (static_cast<int64_t>(text.size()) > limits::kFileBytes) {
    throw InputError(fmt::format("{}: {} bytes, more than the limit of {}",
                                 where, text.size(),
                                 power_of_two(limits::kFileBytes)));
  }
  check_depth(text, where);
  // A key twice in one object is an error, not "the last one wins": the
  // writer of the file meant one of them, and the reader cannot know which.
  std::vector<std::set<std::string>> keys;  // per open object
  std::string duplicate;
  const json::parser_callback_t no_duplicates =
      [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
        if (event == json::parse_event_t::key && !keys.empty() &&
            !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        return true;
      };
  json j;
  try {
    j = json::parse(text, no_duplicates);
  } catch (const json::exception& e) {
    throw InputError(
        one_line(fmt::format("{}: not valid JSON: {}", where, e.what())));
  }
  if (!duplicate.empty()) {
    throw InputError(one_line(fmt::format(
        "{}: key \"{}\" appears twice in one object", where,
        duplicate.size() > 60 ? duplicate.substr(0, 57) + "..." : duplicate)));
  }
  return j;
}

json read_json_file(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path));
  // Read in pieces up to the limit: a pipe or a device has no size to ask.
  std::string text;
  std::array<char, 1 << 16> buffer;
  while (in) {
    in.read(buffer.data(), buffer.size());
    const auto got = static_cast<size_t>(in.gcount());
    // JSON text has no NUL byte (not even inside strings): a binary file
    // or /dev/zero is refused at once, not read up to the limit.
    if (std::memchr(buffer.data(), '\0', got)) {
      throw InputError(fmt::format(
          "{}: not valid JSON: a NUL byte at offset {}", path,
          text.size() + static_cast<size_t>(
                            static_cast<const char*>(
                                std::memchr(buffer.data(), '\0', got)) -
                            buffer.data())));
    }
    text.append(buffer.data(), got);
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      throw InputError(fmt::format("{}: more than the limit of {} bytes", path,
                                   power_of_two(max_bytes)));
    }
  }
  if (in.bad()) throw InputError(fmt::format("{}: cannot read file", path));
  return parse_json(text, path);
}

namespace {

// meta: where a fixture came from. The fields attncheck writes must have
// their types (replay reads them); others are kept, as provenance.
void check_meta(Reader& r, const json& meta) {
  if (!meta.is_object()) r.field_error("meta", "expected an object");
  for (const char* key : {"property", "impl", "dtype", "reproduce",
                          "attncheck"}) {
    const auto it = meta.find(key);
    if (it != meta.end() && !it->is_string()) {
      r.field_error(fmt::format("meta.{}", key),
                    fmt::format("expected a string, got {}", brief(*it)));
    }
  }
  // The options the failing run had (properties/runner.cpp); absent in
  // fixtures saved before they were recorded.
  if (const auto strict = meta.find("strict"); strict != meta.end() && !strict->is_boolean()) {
    r.field_error("meta.strict", fmt::format("expected true or false, got {}", brief(*strict)));
  }
  if (const auto profile = meta.find("profile");
      profile != meta.end() && (!profile->is_string() || (*profile != "ci" && *profile != "thorough"))) {
    r.field_error("meta.profile", fmt::format("expected \"ci\" or \"thorough\", got {}", brief(*profile)));
  }
  const auto positive_below = [&](const char* key, int64_t limit) {
    const auto it = meta.find(key);
    if (it == meta.end()) return;
    const bool ok = it->is_number_integer() && it->get<int64_t>() >= 1 && it->get<int64_t>() <= limit;
    if (!ok) {
      r.field_error(fmt::format("meta.{}", key),
                    fmt::format("expected an integer from 1 to {}, got {}", limit, brief(*it)));
    }
  };
  positive_below("cases", 100000);
  positive_below("timeout_ms", 86400000);
  const auto seed = meta.find("seed");
  const bool seed_ok =
      seed == meta.end() ||
      (seed->is_number_unsigned() &&
       seed->get<uint64_t>() < (uint64_t{1} << 53)) ||
      (seed->is_number_integer() && seed->get<int64_t>() >= 0 &&
       seed->get<int64_t>() < (int64_t{1} << 53));
  if (!seed_ok) {
    r.field_error("meta.seed", fmt::format("expected an integer below 2^53, "
                                           "got {}",
                                           brief(*seed)));
  }
}

}  // namespace

Fixture fixture_from_json(const json& j, const std::string& where) {
  Reader r(j, where);
  const std::string format = r.string("format", r.required("format"));
  Fixture f;
  if (format == kProblemFormat) {
    f.problem = problem_from_json(j, where);
    return f;
  }
  if (format != kFixtureFormat) {
    r.field_error("format",
                  fmt::format("expected \"{}\" or \"{}\", got \"{}\"",
                              kProblemFormat, kFixtureFormat, format));
  }
  f.problem = problem_from_json(r.required("problem"),
                                fmt::format("{}: problem", where));
  // args: what the property drew beyond the problem. Only its shape is
  // the format's; the property that reads them checks their values against
  // the problem before replaying (PropertyDef::validate_args).
  if (const json* v = r.optional("args")) {
    if (!v->is_object()) r.field_error("args", "expected an object");
    f.args = *v;
  }
  if (const json* v = r.optional("expected")) f.expected = *v;
  if (const json* v = r.optional("meta")) {
    check_meta(r, *v);
    f.meta = *v;
  }
  r.reject_unknown_fields();
  return f;
}

Fixture load_fixture(const std::string& path) {
  return fixture_from_json(read_json_file(path), path);
}

void save_fixture(const std::string& path, const Fixture& f) {
  const std::filesystem::path file(path);
  std::error_code ec;
  if (file.has_parent_path()) {
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) {
      throw InputError(fmt::format("{}: cannot create directory {}: {}", path,
                                   file.parent_path().string(), ec.message()));
    }
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out)
    throw InputError(fmt::format("{}: cannot open file for writing", path));
  std::string text;
  write_pretty(text, fixture_to_json(f), 0);
  out << text << '\n';
  out.close();
  if (!out) throw InputError(fmt::format("{}: cannot write file", path));
}

json oracle_to_json(const Problem& p, const OracleResult& r) {
  json empty = json::array();
  for (const auto& e : r.empty_rows) empty.push_back({e[0], e[1], e[2]});
  json j;
  j["format"] = std::string(kOracleFormat);
  j["out"] = numbers_to_json(r.out);
  j["weights"] = numbers_to_json(r.weights);
  j["lse"] = numbers_to_json(r.lse);
  j["empty_rows"] = std::move(empty);
  // Each value the oracle could not prove correctly rounded, as
  // ["array", i0, i1, ...]: the array's name ("out", "weights", "lse", "dq",
  // "dk", "dv") then its multi-index in that array's documented shape
  // (e.g. ["out", b, h, i, d], ["lse", b, h, i], ["dk", b, kv_h, j, c]).
  json uncertified = json::array();
  for (const auto& u : r.uncertified) {
    json e = json::array({u.array});
    for (int64_t x : u.index) e.push_back(x);
    uncertified.push_back(std::move(e));
  }
  j["uncertified"] = std::move(uncertified);
  if (!p.dout.empty()) {
    j["dq"] = numbers_to_json(r.dq);
    j["dk"] = numbers_to_json(r.dk);
    j["dv"] = numbers_to_json(r.dv);
  }
  return j;
}

}  // namespace attncheck
