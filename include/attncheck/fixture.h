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
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/outcome.h"
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
/// limits of formats/json.h; only a regular file is read: a FIFO, socket,
/// device or directory is refused without blocking), validating the problem, the fixture's meta
/// (string fields, a seed below 2^53) and that args is an object; the
/// values of args are the property's to check, before replay. Throws
/// InputError naming the file and the field.
Fixture load_fixture(const std::string& path);

/// The fixture files `paths` name, in the order given: a path that is not
/// a folder as it is (load_fixture refuses it unless a regular file: a
/// FIFO, socket or device is never opened for reading), a folder's regular
/// *.json files (not its subfolders') sorted by name. Throws InputError
/// "PATH: no such file or folder" for a path that does not exist; a folder
/// without fixtures gives none.
std::vector<std::string> fixture_files(const std::vector<std::string>& paths);

/// Writes a fixture, creating parent directories, as an output file is
/// written (absent or a regular file, replaced atomically; a FIFO, device,
/// directory or symbolic link there is refused, never opened). Throws
/// InputError "fixture: cannot write 'PATH': why".
void save_fixture(const std::string& path, const Fixture& f);

// ---- The expected-failures list (SPEC 5.2, by cause as docs/cli.md) ----
// Entries by property, (implementation, property) pairs reported xfail on
// any failure (and xpass when they pass), and entries by cause, a known
// finding of the implementations they name (outcome.h: KnownFinding).

/// Where `attncheck check` reads the list, relative to the working
/// directory: a project keeps its own list.
inline constexpr const char* kExpectedFailuresPath = "fixtures/expected-failures.json";

/// An entry by cause.
struct ExpectedFinding {
  std::vector<std::string> impls;       ///< names or globs (fnmatch), any of which
  std::optional<std::string> property;  ///< only this property's runs; nullopt = every one
  KnownFinding finding;                 ///< finding.fixture as the file resolved it

  /// Whether the entry applies to `impl`'s runs of `property`.
  bool applies(const std::string& impl, const std::string& property) const;
  /// Whether the entry names `impl`.
  bool names(const std::string& impl) const;
};

/// A loaded list.
struct ExpectedFailures {
  std::string path;  ///< the file it was read from, named in an xpass's message
  std::set<std::pair<std::string, std::string>> entries;  ///< by property: (impl, property)
  std::vector<ExpectedFinding> findings;                  ///< by cause, in the file's order

  /// True when `property` on `impl` is expected to fail, whatever the cause.
  bool expects(const std::string& impl, const std::string& property) const {
    return entries.count({impl, property}) > 0;
  }
  /// The known findings of `impl`'s runs of `property`, in the file's order
  /// (RunConfig::known_findings).
  std::vector<KnownFinding> findings_for(const std::string& impl,
                                         const std::string& property) const;
};

/// Reads the list at `path`: an array of entries, or an object holding that
/// array under "expected_failures". An entry by property is {"impl",
/// "property", "reason"}; an entry by cause is {"impl": NAME, GLOB or an
/// array of them, "cause": a bug class of the catalogue (core/bugs.h),
/// "finding": its name, "reason", "fixture": the finding's counterexample,
/// a file relative to the working directory or to the list's folder, and
/// optionally "property"}. Either may carry "unless_cpu_has": [FEATURE,
/// ...] (avx2, fma, avx512f, avx512bw, avx512vl, avx512dq, amx_tile,
/// amx_bf16): it then holds only on a CPU that lacks one of them, and
/// "if_cpu_has": [FEATURE, ...]: it then holds only on a CPU that has all of
/// them (AMX: as the OS lets a program use it), a finding in a path a
/// kernel takes on some machines. A missing file is an empty list. Throws InputError
/// naming `path`, the entry and the field for anything else (an unknown
/// key, cause or feature, a fixture that is not a readable regular file).
ExpectedFailures load_expected_failures(const std::string& path);

}  // namespace attncheck
