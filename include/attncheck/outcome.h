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

/// What the real-size phase of a case property (SPEC 3) did with its
/// shapes, one verdict per shape: judged (passed, or the failing one),
/// beyond the declared precision (SPEC 4's first-order limit: discarded by
/// every property but AsAccurateAsBaseline, which judges exactly those and
/// counts them among judged too), discarded for another reason (the oracle
/// could not certify a value, a draw found no valid case), or refused by
/// the implementation (ATTNCHECK_UNSUPPORTED).
struct RealSizeCounts {
  int shapes = 0;
  int judged = 0;
  int beyond_precision = 0;
  int discarded = 0;
  int unsupported = 0;
};

/// "16 shapes: 10 judged, 4 beyond the declared precision, 1 discarded, 1
/// unsupported"; zero counts after judged are left out. `beyond_judged`:
/// the property judges the shapes beyond the declared precision (SPEC 3:
/// AsAccurateAsBaseline's subject), so they are among the judged;
/// `beyond_judge`: the property that does (named when every shape of
/// another was beyond the precision), "" when the catalog has none.
std::string real_size_summary(const RealSizeCounts& c, bool beyond_judged,
                              std::string_view beyond_judge);

/// A known finding of an implementation (an entry of the expected-failures
/// list by cause, SPEC 5.2 as docs/cli.md extends it): a failure is xfail
/// only when its counterexample's every offending element is one `cause`
/// predicts (judge/causes.h), and the finding is gone (xpass) only when
/// `fixture` no longer fails.
struct KnownFinding {
  std::string cause;    ///< a bug class of the catalogue (core/bugs.h)
  std::string finding;  ///< the finding's name where it is recorded ("F1")
  std::string reason;   ///< what the kernel does, for the report
  std::string fixture;  ///< the finding's smallest counterexample (a path)

  bool operator==(const KnownFinding&) const = default;
};

/// What one run found.
/// The failure database (docs/cli.md, "Saved failures"): what an item's
/// saved fixture gave when it was replayed before the search.
struct SavedFailure {
  enum class Result : uint8_t {
    still_fails,  ///< it fails, and no known finding explains it
    known,        ///< it fails as a known finding explains (by cause)
    now_passes,   ///< it passes: moved aside, or removed (--prune-fixed)
    unreadable,   ///< it no longer replays (not read, not a case): left alone
  };
  std::string fixture;  ///< the file replayed
  Result result = Result::still_fails;
  /// now_passes: where it was moved ("" = removed); unreadable: why.
  std::string note;
  bool operator==(const SavedFailure&) const = default;
};

/// What a property's cases had to reach (where the implementation declares
/// it: a row past its key block, a GQA group above 1, causal in each
/// alignment) and how many of the problems drawn did.
struct CoverageTarget {
  std::string what;
  int64_t reached = 0;
  int64_t drawn = 0;  ///< problems drawn that could have reached it
  bool operator==(const CoverageTarget&) const = default;
};

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
  /// The real-size phase's shapes (SPEC 3), when it ran.
  std::optional<RealSizeCounts> real_sizes;
  std::string message;  ///< one line, or the whole failure report
  std::optional<std::string> fixture;
  /// Why the failure's fixture could not be saved (one line naming the file
  /// and the reason); the command then ends with exit 2 (docs/cli.md).
  std::optional<std::string> fixture_error;
  std::optional<CounterexampleShape> counterexample;
  /// Names of the known bug classes (judge/diagnosis.h) that explain the
  /// shrunk counterexample's output; empty when none does or nothing failed.
  std::vector<std::string> diagnosis;
  /// xfail by cause: the known finding that explains the counterexample;
  /// xpass by cause: the finding whose fixture no longer fails. nullopt for
  /// an entry by property (any failure expected) and every other status.
  std::optional<KnownFinding> expected;
  /// failed: the known findings that explain part of the counterexample
  /// (some calls), though not all of it: named in the report, never a
  /// reason to expect the failure.
  std::vector<std::string> also_explained;
  /// The saved fixture of this item replayed before the search; nullopt =
  /// none was saved (or the run saves none).
  std::optional<SavedFailure> saved;
  /// The coverage targets of the search's draws (check --statistics shows
  /// them; one never reached is a `note:`); empty where none applies.
  std::vector<CoverageTarget> coverage;
};

}  // namespace attncheck
