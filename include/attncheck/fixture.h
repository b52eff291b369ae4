#pragma once
// The files a library user reads and writes beside a run (SPEC 5.2, 5.3):
// fixtures (a saved counterexample; a problem file reads as one) and the
// expected-failures list, kept among them (fixtures/expected-failures.json).
// Their JSON codecs are the formats room's own (formats/json.h).

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "attncheck/problem.h"

namespace attncheck {

/// Where a fixture came from (its "meta", SPEC 5.3): the failing run's
/// property, implementation and options, written by the failure report
/// (run/failure_report.cpp) and read by replay (replay_config). Each field
/// is nullopt when the file does not record it (a fixture written by hand,
/// or before the field was recorded).
struct FixtureMeta {
  std::optional<std::string> property;
  std::optional<std::string> impl;
  std::optional<std::string> dtype;      ///< the combination's name (SPEC 5.2)
  std::optional<uint64_t> seed;          ///< below 2^53
  std::optional<std::string> reproduce;  ///< RapidCheck's reproduce map, or ""
  std::optional<std::string> attncheck;  ///< the version that wrote it
  std::optional<bool> strict;
  std::optional<std::string> profile;    ///< "ci" or "thorough"
  std::optional<int> cases;              ///< 1 to 100000
  std::optional<int64_t> timeout_ms;     ///< 1 to 86400000
  /// The dispatch path the failing call took (SPEC 4.1): replay judges by
  /// it a call that names none.
  std::optional<std::string> path;
  /// AsAccurateAsBaseline's F, when not the default (replay refuses one
  /// below 1).
  std::optional<double> baseline_factor;
  /// The fields attncheck does not write, kept as provenance (an object;
  /// never one of the names above).
  nlohmann::json other = nlohmann::json::object();

  bool operator==(const FixtureMeta&) const = default;
};

/// A saved counterexample: the problem, what the property needs beyond it,
/// the expected values (or null) and where it came from.
struct Fixture {
  Problem problem;
  nlohmann::json args = nlohmann::json::object();
  nlohmann::json expected = nullptr;
  FixtureMeta meta;
};

/// Reads a file holding either a problem or a fixture (within the input
/// limits of formats/json.h), validating the problem, the fixture's meta
/// (string fields, a seed below 2^53) and that args is an object; the
/// values of args are the property's to check, before replay. Throws
/// InputError naming the file and the field.
Fixture load_fixture(const std::string& path);

/// Writes a fixture, creating parent directories, as an output file is
/// written (absent or a regular file, replaced atomically; a FIFO, device,
/// directory or symbolic link there is refused, never opened). Throws
/// InputError "fixture: cannot write 'PATH': why".
void save_fixture(const std::string& path, const Fixture& f);

// ---- The expected-failures list (SPEC 5.2) ----
// (implementation, property) pairs that fail because of known upstream
// behaviour, reported xfail (and xpass when they pass).

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
/// is an empty list. An entry with "unless_cpu_has": [FEATURE, ...] (avx2,
/// fma, avx512f, avx512bw, avx512vl, avx512dq) holds only on a CPU
/// that lacks one of them: a finding in a path a kernel takes on some
/// machines, where elsewhere the pair must pass. Throws InputError naming
/// `path` for anything else.
ExpectedFailures load_expected_failures(const std::string& path);

}  // namespace attncheck
