// JSON text and files read within input_limits: the size, the nesting, a
// NUL byte and a key given twice are refused before (or while) nlohmann
// parses, each as one line naming the file.

#include <array>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attncheck/dtype.h"
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

}  // namespace

json parse_json(std::string_view text, const std::string& where) {
  if (static_cast<int64_t>(text.size()) > input_limits::kFileBytes) {
    throw InputError(fmt::format("{}: {} bytes, more than the limit of {}",
                                 where, text.size(),
                                 power_of_two(input_limits::kFileBytes)));
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

}  // namespace attncheck
