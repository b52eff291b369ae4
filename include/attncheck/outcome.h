#pragma once
// What one (implementation, dtype, property) run found: the verdict and its
// evidence. A core type, so the report format (formats/) and the session
// (properties/) share it without the lower room knowing the higher.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"

namespace attncheck {

/// Verdict of one (implementation, dtype, property) run (SPEC 5.2).
enum class PropertyStatus { passed, failed, xfail, xpass, skipped, unsupported, not_run };

/// "passed", "failed", ...
std::string_view status_name(PropertyStatus s);

/// Shape of a counterexample, for the report.
struct CounterexampleShape {
  int64_t batch, heads, kv_heads, tq, tk, dk, dv;
  DType dtype;
};

/// What one run found.
struct PropertyOutcome {
  std::string property;
  std::string impl;
  Kind kind = Kind::reference;
  DType dtype = DType::f64;  ///< the output's format
  /// A mixed combination of formats the run was asked for (--dtype
  /// q=F,kv=F,out=F); nullopt = q = kv = out = dtype.
  std::optional<DTypeCombo> combo;
  PropertyStatus status = PropertyStatus::not_run;
  int cases = 0;        ///< cases judged
  int discarded = 0;    ///< cases not judged (unsupported, ill-conditioned)
  double max_budget_used = 0;  ///< largest budget used by a passing case
  std::string message;  ///< one line, or the whole failure report
  std::optional<std::string> fixture;
  /// Why the failure's fixture could not be saved (one line naming the file
  /// and the reason); the command then ends with exit 2 (docs/cli.md).
  std::optional<std::string> fixture_error;
  std::optional<CounterexampleShape> counterexample;
  /// Names of the known bug classes (judge/diagnosis.h) that explain the
  /// shrunk counterexample's output; empty when none does or nothing failed.
  std::vector<std::string> diagnosis;
};

}  // namespace attncheck
