#pragma once
// The interface a session's reporter implements (attncheck/session.h hands
// it each outcome as it comes); the text, JSON and JUnit reporters are in
// attncheck/reporters.h.

#include <cstdint>

#include "attncheck/outcome.h"
#include "attncheck/properties.h"

namespace attncheck {

struct Shard;
struct SessionResult;

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

}  // namespace attncheck
