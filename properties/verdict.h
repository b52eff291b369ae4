#pragma once
// A case's verdict, attncheck's own (as proptest's runner owns
// TestCaseError::{Fail, Reject}): the judge of a property passes a case,
// fails it with evidence, or discards it with a reason. CaseContext ends a
// case by throwing CaseEnded; run/judge_once.h catches it, with one rule
// for every other exception, for each of the engine's callers (the
// RapidCheck driver, the real-size search, the shrink passes, replay).
// Only the driver translates a verdict into RapidCheck's terms.

#include <string>

namespace attncheck {

struct Verdict {
  /// set_aside: a failure the search does not seek (run/judge_once.h): one
  /// the run's known findings explain while it seeks one they do not, or
  /// the reverse while it shrinks an explained one. Neither a pass (no case
  /// is counted) nor a failure (the search goes on past it).
  enum class Kind { pass, fail, discard, set_aside };
  Kind kind = Kind::pass;
  /// fail: the evidence, as the failure report prints it; discard: the
  /// reason the case is counted under; pass: empty.
  std::string message;
  /// fail: the implementation crashed or hung in the call (host/isolation.h),
  /// so there is no output to diagnose.
  bool died = false;
  /// died of a signal: its number (ImplementationDied::signal), else 0.
  int signal = 0;

  static Verdict pass() { return {}; }
  static Verdict fail(std::string evidence, bool died = false, int signal = 0) {
    return {Kind::fail, std::move(evidence), died, signal};
  }
  static Verdict discard(std::string reason) { return {Kind::discard, std::move(reason), false}; }
  static Verdict set_aside(std::string evidence) {
    return {Kind::set_aside, std::move(evidence), false};
  }

  bool passed() const { return kind == Kind::pass; }
  bool failed() const { return kind == Kind::fail; }
  bool discarded() const { return kind == Kind::discard; }
  bool was_set_aside() const { return kind == Kind::set_aside; }
};

/// What CaseContext::fail and discard throw to end a case early, carrying
/// its verdict to judge_once. Deliberately no std::exception: a judge's
/// `catch (const std::exception&)` around an implementation's call never
/// swallows a verdict.
struct CaseEnded {
  Verdict verdict;
};

}  // namespace attncheck
