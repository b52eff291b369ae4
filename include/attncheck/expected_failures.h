#pragma once
// The expected-failures list of SPEC 5.2: (implementation, property) pairs
// that fail because of known upstream behaviour, reported xfail (and xpass
// when they pass).

#include <set>
#include <string>
#include <utility>

namespace attncheck {

/// Where `attncheck check` reads the list, relative to the working
/// directory: a project keeps its own list.
inline constexpr const char* kExpectedFailuresPath = "fixtures/expected-failures.json";

/// A loaded list.
struct ExpectedFailures {
  std::string path;  ///< the file it was read from, named in an xpass's message
  std::set<std::pair<std::string, std::string>> entries;  ///< (impl, property)

  /// True when `property` on `impl` is expected to fail.
  bool expects(const std::string& impl, const std::string& property) const {
    return entries.count({impl, property}) > 0;
  }
};

/// Reads the list at `path`: an array of {"impl", "property", "reason"}, or
/// an object holding that array under "expected_failures". A missing file
/// is an empty list. Throws InputError naming `path` for anything else.
ExpectedFailures load_expected_failures(const std::string& path);

}  // namespace attncheck
