// JSON text and files read within input_limits: the size, the nesting, a
// NUL byte and a key given twice are refused before (or while) nlohmann
// parses, each as one line naming the file.

#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "formats/input_file.h"
#include "formats/json.h"
#include "formats/json_reader.h"

namespace attncheck {
namespace {

using nlohmann::json;
using formats::one_line;
using formats::power_of_two;

// Refuses nesting deeper than input_limits::kJsonDepth before nlohmann
// parses (and later prints and frees) the value recursively. Brackets
// inside strings do not count.
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
      if (++depth > input_limits::kJsonDepth) {
        throw InputError(fmt::format(
            "{}: not valid JSON: arrays and objects nested deeper than {}",
            where, input_limits::kJsonDepth));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}


// The tensors of a problem (SPEC 5.3) that parse_json packs.
bool is_tensor_key(std::string_view key) {
  return key == "q" || key == "k" || key == "v" || key == "dout";
}

// nlohmann's SAX events made into the DOM json::parse would give, with
// two differences: a key given twice is remembered (the first one), and,
// when asked, each problem tensor (q, k, v, dout of the root object, or of
// a fixture's "problem") whose elements are all numbers or "inf", "-inf",
// "nan" is stored as formats::kPackedNumbers: 8 bytes a value instead of
// a DOM node of 16 and its number (SPEC 5.3 files are mostly tensors).
// A tensor holding anything else is built as an array, for its error.
class Builder {
 public:
  /// `text_bytes`: the size of the text parsed, which bounds a tensor's
  /// number of values.
  Builder(bool pack, size_t text_bytes) : pack_(pack), text_bytes_(text_bytes) {}

  json root;
  std::string duplicate;  ///< the first key given twice in one object
  std::string error;      ///< the parse error, when sax_parse returns false

  bool null() {
    if (packing_) unpack();
    return put(nullptr);
  }
  bool boolean(bool b) {
    if (packing_) unpack();
    return put(b);
  }
  bool number_integer(json::number_integer_t x) {
    return packing_ ? pack(static_cast<double>(x)) : put(x);
  }
  bool number_unsigned(json::number_unsigned_t x) {
    return packing_ ? pack(static_cast<double>(x)) : put(x);
  }
  bool number_float(json::number_float_t x, const json::string_t&) {
    return packing_ ? pack(x) : put(x);
  }
  bool string(json::string_t& s) {
    if (packing_) {
      if (s == "inf") return pack(std::numeric_limits<double>::infinity());
      if (s == "-inf") return pack(-std::numeric_limits<double>::infinity());
      if (s == "nan") return pack(std::numeric_limits<double>::quiet_NaN());
      unpack();
    }
    return put(std::move(s));
  }
  bool binary(json::binary_t& b) { return put(std::move(b)); }
  bool start_object(std::size_t) {
    if (packing_) unpack();
    open(value(json::value_t::object));
    keys_.emplace_back();
    return true;
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second && duplicate.empty()) duplicate = k;
    member_ = &(*stack_.back())[k];
    key_ = k;
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    names_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    if (packing_) unpack();
    // The root object, or the object under the root's "problem".
    const bool in_problem = stack_.size() == 1 || (stack_.size() == 2 && names_[1] == "problem");
    if (pack_ && !stack_.empty() && stack_.back()->is_object() && in_problem && is_tensor_key(key_)) {
      packing_ = true;
      bytes_ = {};
      // Room for as many values as the text can hold (each is a character
      // and a separator at least), so a tensor's bytes are never copied
      // to grow: reserved, not touched, the rest costs no memory.
      bytes_.reserve(text_bytes_ / 2 * sizeof(double));
      return true;
    }
    open(value(json::value_t::array));
    return true;
  }
  bool end_array() {
    if (packing_) {
      packing_ = false;
      // A tensor far smaller than the text gives its reserved room back.
      if (bytes_.capacity() > 2 * bytes_.size() + (1 << 20)) bytes_.shrink_to_fit();
      value(json::binary(std::move(bytes_), formats::kPackedNumbers));
      bytes_ = {};
      return true;
    }
    stack_.pop_back();
    names_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }

 private:
  template <typename V>
  bool put(V&& v) {
    value(std::forward<V>(v));
    return true;
  }
  // Puts `v` where the parse is: the root, the open array's end, or the
  // member whose key was read last; returns it.
  template <typename V>
  json* value(V&& v) {
    if (stack_.empty()) {
      root = json(std::forward<V>(v));
      return &root;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->emplace_back(std::forward<V>(v));
      return &stack_.back()->back();
    }
    *member_ = json(std::forward<V>(v));
    return member_;
  }
  void open(json* container) {
    names_.push_back(stack_.empty() || stack_.back()->is_array() ? std::string() : key_);
    stack_.push_back(container);
  }
  bool pack(double x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    bytes_.insert(bytes_.end(), p, p + sizeof x);
    return true;
  }
  // The tensor holds something else than numbers: an array after all, of
  // the values so far, for the reader's error naming the element.
  void unpack() {
    packing_ = false;
    json* a = value(json::value_t::array);
    for (size_t i = 0; i + sizeof(double) <= bytes_.size(); i += sizeof(double)) {
      double x;
      std::memcpy(&x, bytes_.data() + i, sizeof x);
      a->push_back(number_to_json(x));
    }
    bytes_ = {};
    open(a);
  }

  bool pack_;
  size_t text_bytes_;
  bool packing_ = false;
  std::vector<uint8_t> bytes_;  ///< the packed tensor being read
  std::vector<json*> stack_;    ///< the open arrays and objects
  std::vector<std::string> names_;  ///< the key of each of stack_ in its object
  std::vector<std::set<std::string>> keys_;  ///< the keys of each open object
  json* member_ = nullptr;      ///< the value of the key read last
  std::string key_;             ///< the key read last
};

}  // namespace

json parse_json(std::string_view text, const std::string& where, bool pack_tensors) {
  if (static_cast<int64_t>(text.size()) > input_limits::kFileBytes) {
    throw InputError(fmt::format("{}: {} bytes, more than the limit of {}",
                                 where, text.size(),
                                 power_of_two(input_limits::kFileBytes)));
  }
  check_depth(text, where);
  Builder builder(pack_tensors, text.size());
  const bool ok = json::sax_parse(text, &builder);
  if (!ok) throw InputError(one_line(fmt::format("{}: not valid JSON: {}", where, builder.error)));
  // A key twice in one object is an error, not "the last one wins": the
  // writer of the file meant one of them, and the reader cannot know which.
  if (!builder.duplicate.empty()) {
    const std::string& d = builder.duplicate;
    throw InputError(one_line(fmt::format("{}: key \"{}\" appears twice in one object", where,
                                          d.size() > 60 ? d.substr(0, 57) + "..." : d)));
  }
  return std::move(builder.root);
}

json read_json_file(const std::string& path, int64_t max_bytes, bool pack_tensors) {
  const std::string text = read_input_file(path, max_bytes);
  // JSON text has no NUL byte (not even inside strings): said as such,
  // not as nlohmann's "invalid literal".
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    throw InputError(fmt::format("{}: not valid JSON: a NUL byte at offset {}", path, nul));
  }
  return parse_json(text, path, pack_tensors);
}

}  // namespace attncheck
