#pragma once
// Reporters of a session (attncheck/session.h), beside it as
// google/benchmark's console and JSON reporters sit beside its runner: the
// interface a session hands each outcome to as it comes, and the reporters
// the harness has: the text `attncheck check` prints, the --report JSON and
// the --junit XML.

#include <chrono>
#include <cstdint>
#include <iostream>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attncheck/outcome.h"
#include "attncheck/properties.h"
#include "attncheck/session.h"

namespace attncheck {

/// Receives a session's events, as google/benchmark's reporters do.
class Reporter {
 public:
  virtual ~Reporter() = default;
  /// Before the first property runs.
  virtual void on_start(uint64_t seed, Profile profile, const Shard& shard) = 0;
  /// After each property ran (expected failures applied).
  virtual void on_outcome(const PropertyOutcome& outcome) = 0;
  /// After the last.
  virtual void on_finish(const SessionResult& result) = 0;
};

/// The text of `attncheck check`: a header line with the version, seed,
/// profile and shard; a line per outcome (a failure's whole report after
/// it), flushed so a watcher sees it at once; the largest budget used per
/// implementation; the counts by status.
class TextReporter : public Reporter {
 public:
  explicit TextReporter(std::ostream& out = std::cout) : out_(out) {}
  /// check --statistics: each outcome's coverage targets, reached of drawn.
  void show_statistics(bool on) { statistics_ = on; }
  void on_start(uint64_t seed, Profile profile, const Shard& shard) override;
  void on_outcome(const PropertyOutcome& outcome) override;
  void on_finish(const SessionResult& result) override;

 private:
  std::ostream& out_;
  bool statistics_ = false;
};

/// The --report JSON (report_json of formats/report.h), written to
/// `path` through write_output_file when the session finishes (the path
/// is checked with check_output_path when the reporter is made).
class JsonReporter : public Reporter {
 public:
  /// Throws InputError "LABEL: cannot write 'PATH'" when `path` cannot be
  /// written, so a session fails before any work; `label` names the path in
  /// errors (the CLI's "--report"). The report's "implementations" holds
  /// the declarations among `impls` of those with an outcome.
  JsonReporter(std::string path, std::string label, std::vector<ImplInfo> impls = {});
  void on_start(uint64_t seed, Profile profile, const Shard& shard) override;
  void on_outcome(const PropertyOutcome& outcome) override;
  void on_finish(const SessionResult& result) override;

 private:
  std::string path_, label_;
  uint64_t seed_ = 0;
  Profile profile_ = Profile::ci;
  int shard_index_ = 1, shard_count_ = 1;  ///< a shard's report says which it is
  std::vector<ImplInfo> impls_;
  std::vector<PropertyOutcome> outcomes_;
};

/// The --junit XML read by CI test reporters (GitLab, Jenkins, GitHub):
/// <testsuites> with a <testsuite> per implementation and a <testcase> per
/// (implementation, dtype, property), classname "attncheck.IMPL.DTYPE",
/// name the property, time the seconds since the previous outcome. A
/// failure and an xpass are <failure message="FIRST LINE" type="STATUS">
/// with the whole report as text; skipped, unsupported, xfail and not-run
/// are <skipped message="STATUS: ...">. Every text is escaped, and what
/// XML 1.0 cannot hold (control characters, bytes that are not UTF-8) is
/// written as the four characters \xHH. Written like JsonReporter.
class JunitReporter : public Reporter {
 public:
  /// Throws InputError "LABEL: cannot write 'PATH'" as JsonReporter does.
  JunitReporter(std::string path, std::string label);
  void on_start(uint64_t seed, Profile profile, const Shard& shard) override;
  void on_outcome(const PropertyOutcome& outcome) override;
  void on_finish(const SessionResult& result) override;

 private:
  std::string path_, label_;
  uint64_t seed_ = 0;
  Profile profile_ = Profile::ci;
  std::chrono::steady_clock::time_point last_;
  std::vector<std::pair<PropertyOutcome, double>> outcomes_;  ///< with seconds
};

/// `s` as XML 1.0 character data or attribute text: & < > " ' as entities,
/// tab, newline and carriage return as character references when
/// `attribute` (a parser would fold them to spaces), other control
/// characters and invalid UTF-8 (bytes, surrogates, U+FFFE/U+FFFF) as the
/// text \xHH.
std::string xml_escape(std::string_view s, bool attribute);

}  // namespace attncheck
