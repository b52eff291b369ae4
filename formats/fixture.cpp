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

// A packed tensor's [rows][heads][d] values (SPEC 1.1: element (row, h, d)
// at h * strides[1] + row * strides[2] + d * strides[3]).
json packed_to_json(const Tensor& t, int64_t rows, int64_t heads, int64_t d) {
  json a = json::array();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < d; ++c)
        a.push_back(number_to_json(t.data[static_cast<size_t>(
            h * t.strides[1] + r * t.strides[2] + c * t.strides[3])]));
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
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_.") ==
          std::string_view::npos;
  if (!identifier) return std::string(message);
  return fmt::format("field '{}': {}", name, message.substr(colon + 2));
}

// The order fields are written in: the order SPEC section 5.3 lists them,
// so that a saved file reads like the specification. Others follow sorted.
// The version 2 fields follow the version 1 ones, as SPEC 5.3 lists them
// (a version 1 file has none of them, and reads as before).
constexpr std::array<std::string_view, 39> kFieldOrder{
    "format",       "dtype",        "batch",     "heads",     "kv_heads",
    "tq",           "tk",           "dk",        "dv",        "q",
    "k",            "v",            "key_valid", "mask",      "bias",
    "causal",       "align",        "window",    "scale",     "softcap",
    "dout",         "q_dtype",      "kv_dtype",  "descale",   "sink",
    "cu_seqlens_q", "cu_seqlens_k", "paged",     "page_size", "num_pages",
    "block_table_stride", "block_table", "seqlens_k", "shape", "data",
    "problem",      "args",         "expected",  "meta"};

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

// cu_seqlens_q / cu_seqlens_k (SPEC 1.1): batch + 1 offsets from 0, never
// decreasing, the longest sequence `dim` (tq or tk) long. Checked here, not
// only by Problem::validate: the tensors' sizes are read from them.
std::vector<int64_t> read_cu_seqlens(const Reader& r, std::string_view name, const json& v,
                                     int64_t batch, std::string_view dim, int64_t longest) {
  const json& a = r.array(name, v, batch + 1, "integers (batch + 1 offsets)");
  std::vector<int64_t> cu;
  cu.reserve(a.size());
  for (const json& x : a) cu.push_back(r.integer(name, x));
  if (cu[0] != 0) r.field_error(name, fmt::format("must start at 0, got {}", cu[0]));
  int64_t most = 0;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    if (cu[b + 1] < cu[b]) {
      r.field_error(name, fmt::format("offsets must not decrease: element {} is {}, after {}",
                                      b + 1, cu[b + 1], cu[b]));
    }
    most = std::max(most, cu[b + 1] - cu[b]);
  }
  if (most != longest) {
    r.field_error(name, fmt::format("the longest sequence has {}, but {} is {} (the longest)",
                                    most, dim, longest));
  }
  return cu;
}

// "paged": {"page_size", "num_pages", "block_table_stride", "block_table",
// "seqlens_k"} (SPEC 5.3). block_table is flat [batch][block_table_stride];
// without block_table_stride its length over batch is the stride. Entries
// past a sequence's keys are never read and may hold anything.
PagedKv read_paged(Reader& r, const json& v, int64_t batch, int64_t tk) {
  Reader in(v, fmt::format("{}: field 'paged'", r.where()));
  PagedKv pg;
  pg.page_size = in.dimension("page_size");
  pg.num_pages = in.dimension("num_pages");
  const json& lengths = in.array("seqlens_k", in.required("seqlens_k"), batch, "integers");
  int64_t most = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t n = in.integer("seqlens_k", lengths[b]);
    if (n < 0) in.field_error("seqlens_k", fmt::format("element {}: {} is negative", b, n));
    pg.seqlens_k.push_back(n);
    most = std::max(most, n);
  }
  if (most != tk) {
    in.field_error("seqlens_k",
                   fmt::format("the longest sequence has {} keys, but tk is {}", most, tk));
  }
  const json& table = in.required("block_table");
  if (!table.is_array()) {
    in.field_error("block_table",
                   fmt::format("expected an array of integers, got {}", type_name(table)));
  }
  if (const json* stride = in.optional("block_table_stride")) {
    pg.block_table_stride = in.integer("block_table_stride", *stride);
    if (pg.block_table_stride < 1) {
      in.field_error("block_table_stride",
                     fmt::format("must be >= 1, got {}", pg.block_table_stride));
    }
  } else if (table.size() % static_cast<size_t>(batch) != 0) {
    in.field_error("block_table", fmt::format("{} entries are not batch = {} rows (and no "
                                              "block_table_stride is given)",
                                              table.size(), batch));
  } else {
    pg.block_table_stride = static_cast<int64_t>(table.size()) / batch;
  }
  const int64_t needed = (tk + pg.page_size - 1) / pg.page_size;
  if (pg.block_table_stride < needed) {
    in.field_error("block_table_stride",
                   fmt::format("{} pages per sequence hold fewer than tk = {} keys need ({})",
                               pg.block_table_stride, tk, needed));
  }
  in.array("block_table", table, element_count(in, "block_table", {batch, pg.block_table_stride}),
           "integers ([batch][block_table_stride])");
  for (size_t idx = 0; idx < table.size(); ++idx) {
    pg.block_table.push_back(in.integer("block_table", table[idx]));
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s * pg.page_size < pg.seqlens_k[static_cast<size_t>(b)]; ++s) {
      const int64_t page = pg.block_table[static_cast<size_t>(b * pg.block_table_stride + s)];
      if (page < 0 || page >= pg.num_pages) {
        in.field_error("block_table",
                       fmt::format("sequence {} page {} is {}, outside [0, num_pages = {})", b, s,
                                   page, pg.num_pages));
      }
    }
  }
  in.reject_unknown_fields();
  return pg;
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
  // Packed and paged tensors in their own layouts (SPEC 5.3): packed
  // [total rows][heads][d], paged [num_pages][kv_heads][page_size][d].
  if (p.packed_q()) {
    j["q"] = packed_to_json(p.q, p.total_q(), p.heads, p.dk);
  } else {
    j["q"] = tensor_to_json(p.q, p.batch, p.heads, p.tq, p.dk);
  }
  if (p.paged) {
    j["k"] = tensor_to_json(p.k, p.paged->num_pages, p.kv_heads, p.paged->page_size, p.dk);
    j["v"] = tensor_to_json(p.v, p.paged->num_pages, p.kv_heads, p.paged->page_size, p.dv);
  } else if (p.packed_k()) {
    j["k"] = packed_to_json(p.k, p.packed->cu_seqlens_k.back(), p.kv_heads, p.dk);
    j["v"] = packed_to_json(p.v, p.packed->cu_seqlens_k.back(), p.kv_heads, p.dv);
  } else {
    j["k"] = tensor_to_json(p.k, p.batch, p.kv_heads, p.tk, p.dk);
    j["v"] = tensor_to_json(p.v, p.batch, p.kv_heads, p.tk, p.dv);
  }
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
  // Version 2 fields (SPEC 5.3) only when present: a version 1 problem's
  // file is what it always was.
  if (p.q_dtype) j["q_dtype"] = std::string(dtype_name(*p.q_dtype));
  if (p.kv_dtype) j["kv_dtype"] = std::string(dtype_name(*p.kv_dtype));
  if (p.descale) {
    j["descale"] = {{"q", number_to_json(p.descale->q)},
                    {"k", number_to_json(p.descale->k)},
                    {"v", number_to_json(p.descale->v)}};
  }
  if (!p.sink.empty()) j["sink"] = numbers_to_json(p.sink);
  if (p.packed_q()) j["cu_seqlens_q"] = p.packed->cu_seqlens_q;
  if (p.packed_k()) j["cu_seqlens_k"] = p.packed->cu_seqlens_k;
  if (p.paged) {
    j["paged"] = {{"page_size", p.paged->page_size},
                  {"num_pages", p.paged->num_pages},
                  {"block_table_stride", p.paged->block_table_stride},
                  {"block_table", p.paged->block_table},
                  {"seqlens_k", p.paged->seqlens_k}};
  }
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
      const bool fp8 = name == "e4m3" || name == "e5m2";
      r.field_error("dtype",
                    fp8 ? fmt::format("{} is an input format only (dtype is the output's: "
                                      "f64, f32, bf16 or f16; inputs take q_dtype and kv_dtype)",
                                      name)
                        : fmt::format("unknown dtype \"{}\" (expected f64, f32, "
                                      "bf16 or f16)",
                                      name));
    }
  }
  // Version 2 (SPEC 1.1): the inputs' formats, when not the output's.
  const auto input_format = [&](std::string_view field) -> std::optional<DType> {
    const json* v = r.optional(field);
    if (v == nullptr) return std::nullopt;
    const std::string name = r.string(field, *v);
    try {
      return parse_format(name);
    } catch (const std::exception&) {
      r.field_error(field, fmt::format("unknown format \"{}\" (expected f64, f32, bf16, "
                                       "f16, e4m3 or e5m2)",
                                       name));
    }
  };
  p.q_dtype = input_format("q_dtype");
  p.kv_dtype = input_format("kv_dtype");
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

  // Version 2 sequences (SPEC 1.1), read before the tensors whose layout
  // they decide: packed queries and keys, paged keys.
  {
    PackedSeqs packed;
    if (const json* v = r.optional("cu_seqlens_q")) {
      packed.cu_seqlens_q = read_cu_seqlens(r, "cu_seqlens_q", *v, p.batch, "tq", p.tq);
    }
    if (const json* v = r.optional("cu_seqlens_k")) {
      packed.cu_seqlens_k = read_cu_seqlens(r, "cu_seqlens_k", *v, p.batch, "tk", p.tk);
    }
    if (!packed.cu_seqlens_q.empty() || !packed.cu_seqlens_k.empty()) p.packed = std::move(packed);
  }
  if (const json* v = r.optional("paged")) {
    if (p.packed_k()) {
      r.field_error("paged", "keys are paged or packed (cu_seqlens_k), not both (SPEC 1.1)");
    }
    p.paged = read_paged(r, *v, p.batch, p.tk);
  }

  const DType q_format = p.q_dtype.value_or(p.dtype);
  const DType kv_format = p.kv_dtype.value_or(p.dtype);
  // Dense [batch][heads][t][d], packed [rows][heads][d] (strides {0, d,
  // heads * d, 1}) or paged [num_pages][kv_heads][page_size][d].
  const auto dense = [&](std::string_view name, int64_t h, int64_t t, int64_t d, DType format) {
    Tensor out;
    out.data = r.numbers(name, r.required(name), element_count(r, name, {p.batch, h, t, d}),
                         format, false);
    out.strides = contiguous_strides(p.batch, h, t, d);
    return out;
  };
  const auto packed = [&](std::string_view name, int64_t rows, int64_t h, int64_t d,
                          DType format) {
    Tensor out;
    out.data = r.numbers(name, r.required(name), element_count(r, name, {rows, h, d}), format,
                         false);
    out.strides = {0, d, h * d, 1};
    return out;
  };
  const auto paged = [&](std::string_view name, int64_t d) {
    Tensor out;
    const int64_t pages = p.paged->num_pages, slots = p.paged->page_size;
    out.data = r.numbers(name, r.required(name),
                         element_count(r, name, {pages, p.kv_heads, slots, d}), kv_format, false);
    out.strides = contiguous_strides(pages, p.kv_heads, slots, d);
    return out;
  };
  p.q = p.packed_q() ? packed("q", p.total_q(), p.heads, p.dk, q_format)
                     : dense("q", p.heads, p.tq, p.dk, q_format);
  if (p.paged) {
    p.k = paged("k", p.dk);
    p.v = paged("v", p.dv);
  } else if (p.packed_k()) {
    const int64_t rows = p.packed->cu_seqlens_k.back();
    p.k = packed("k", rows, p.kv_heads, p.dk, kv_format);
    p.v = packed("v", rows, p.kv_heads, p.dv, kv_format);
  } else {
    p.k = dense("k", p.kv_heads, p.tk, p.dk, kv_format);
    p.v = dense("v", p.kv_heads, p.tk, p.dv, kv_format);
  }

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
    // Packed like q when queries are packed: [total_q][heads][dv].
    p.dout = r.numbers("dout", *v,
                       p.packed_q() ? element_count(r, "dout", {p.total_q(), p.heads, p.dv})
                                    : element_count(r, "dout", {p.batch, p.heads, p.tq, p.dv}),
                       p.dtype, false);
  }
  if (const json* v = r.optional("descale")) {
    Reader in(*v, fmt::format("{}: field 'descale'", where));
    Descales d;
    for (auto [name, value] : {std::pair<const char*, double*>{"q", &d.q}, {"k", &d.k}, {"v", &d.v}}) {
      *value = number_from_json(in.required(name),
                                fmt::format("{}: field 'descale': field '{}'", where, name));
      if (!std::isfinite(*value) || *value <= 0) {
        in.field_error(name, fmt::format("must be finite and > 0, got {}", *value));
      }
    }
    in.reject_unknown_fields();
    p.descale = d;
  }
  if (const json* v = r.optional("sink")) {
    // A logit per head, any finite double (SPEC 1.1).
    p.sink = r.numbers("sink", *v, p.heads, DType::f64, true);
  }
  // SPEC 1.1's table: packed and paged problems take none of these.
  if (p.varlen()) {
    for (const char* name : {"key_valid", "mask", "bias"}) {
      const bool given = (name == std::string_view("key_valid") && !p.key_valid.empty()) ||
                         (name == std::string_view("mask") && p.mask) ||
                         (name == std::string_view("bias") && p.bias);
      if (given) {
        r.field_error(name, "a packed or paged problem takes none (SPEC 1.1)");
      }
    }
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
    // SPEC 1.1: d sink_h, summed over every sequence and query row.
    if (!p.sink.empty()) j["dsink"] = numbers_to_json(r.dsink);
  }
  return j;
}

}  // namespace attncheck
