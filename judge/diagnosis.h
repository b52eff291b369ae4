#pragma once
// Diagnosis of a failure: the bug classes attncheck knows, each a hypothesis
// about what the implementation computed instead of SPEC section 1, tested
// on a counterexample. A hypothesis explains an output when the output
// matches the hypothesis's result within the implementation's tolerance for
// it, and that result is told apart from the correct one (their tolerance
// intervals are disjoint somewhere), so a correct implementation is never
// given a diagnosis. An error reported on rows that have allowed keys is
// explained by the hypotheses under which exactly those rows are empty. A
// name is kept only when it also explains the unshrunk failing case (or,
// without one, a problem near the shrunk one), so a shrunk problem that is
// degenerate does not get a confident wrong name. The bug classes' names
// and report lines are the bug catalogue's (core/bugs.h), the table is in
// judge/hypotheses.cpp, the matching in judge/diagnosis.cpp.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/oracle.h"
#include "judge/tolerance.h"

namespace attncheck {

/// What an alternative semantics computes for a problem.
struct Alternative {
  /// The problem whose shape, allowed keys and values the tolerance of
  /// `result` is computed from (SPEC 4); its out, weights and lse are laid
  /// out like the original problem's.
  Problem problem;
  /// The alternative's result, with the quantities tolerances() reads: the
  /// oracle's for a transformed problem, or a recomputation in long double
  /// for what a Problem cannot express.
  OracleResult result;
  /// The arithmetic the tolerance assumes: the declared traits, or a lower
  /// precision for the precision hypotheses.
  PrecisionTraits traits;
  /// True when only the arithmetic is in question (`result` is the correct
  /// one): the output must then fit `traits` and fail the declared traits.
  bool same_values = false;
  /// False when the hypothesis says nothing about lse (it is not compared).
  bool predicts_lse = true;
};

/// The alternative for a problem, given the correct result and the declared
/// traits, or nullopt where the hypothesis cannot change anything (no causal
/// mask for a causal bug, tq == tk for an alignment bug, ...).
using AlternativeFn = std::function<std::optional<Alternative>(
    const Problem& p, const OracleResult& correct, const PrecisionTraits& declared)>;

/// Several alternatives of one bug class for a problem, for a class with a
/// parameter the problem does not fix (the threshold below which an exp
/// returns 0); empty where none applies.
using AlternativesFn = std::function<std::vector<Alternative>(
    const Problem& p, const OracleResult& correct, const PrecisionTraits& declared)>;

/// The offending elements of one answered call (ok status) of a dense
/// problem: those outside SPEC 4's tolerance of the correct result. The
/// tolerance is T, or T^L (tolerances(..., at_limit = true)) on a row beyond
/// the first-order analysis, or none (only a non-finite answer offends) on
/// a row beyond both; a row without allowed keys offends wholly under the
/// error policy (an error was due) and wherever it is not zero under the
/// zero policy. Weights and lse count where the implementation declares
/// them. Made by offence() (judge/causes.h), which can also count every
/// inexact element of a row beyond the first-order analysis.
struct Offence {
  const Problem* p = nullptr;
  const ForwardResult* got = nullptr;
  const OracleResult* correct = nullptr;
  std::vector<double> out_tol;  ///< the tolerance each out element is judged by
  std::vector<uint8_t> out, weights, lse;  ///< 1 = offending
  std::vector<uint8_t> beyond;  ///< per row: beyond T's first-order analysis
  bool any = false;                        ///< some element offends
  bool weights_or_lse = false;             ///< some weight or lse element offends
};

/// A bug class's own test of an offence, where no alternative result can
/// say it (a kernel's accumulator that overflows where a sum leaves its
/// format): true when the class predicts every offending element.
using EvidenceFn = std::function<bool(const Offence& o, const ImplInfo& info)>;

/// One known bug class. It explains an output when its alternative does, or
/// (with `candidates`) when any one of them does, or (with `evidence` and
/// neither) when its evidence predicate holds for the output's offence.
struct Hypothesis {
  std::string name;         ///< listed in the JSON report's "diagnosis"
  std::string description;  ///< the report line after "diagnosis: "
  AlternativeFn alternative;
  AlternativesFn candidates = {};  ///< used instead of `alternative` when set
  /// The known-cause test (judge/causes.h): used there instead of the
  /// alternatives when set, and by diagnose() when there are none.
  EvidenceFn evidence = {};
  /// The alternative's result is the oracle's for a transformed problem, so
  /// it holds with sinks too (recomputations do not know them).
  bool knows_sinks = false;
};

/// Whether `alt` explains `got` for p (condition (1) and (2) of
/// judge/diagnosis.cpp's header): `correct` = oracle(p), `tol` its
/// tolerances by the declared traits.
bool alternative_explains(const Alternative& alt, const Problem& p, const ForwardResult& got,
                          const OracleResult& correct, const Tolerances& tol,
                          const ImplInfo& info);

/// The alternatives of `h` for p (none where it cannot be computed).
std::vector<Alternative> alternatives_of(const Hypothesis& h, const Problem& p,
                                         const OracleResult& correct,
                                         const PrecisionTraits& declared);

/// Every known bug class, in report order.
const std::vector<Hypothesis>& hypothesis_table();

/// The hypothesis with this name, or nullptr.
const Hypothesis* find_hypothesis(std::string_view name);

/// Names of the hypotheses that explain `got`, the forward result of an
/// implementation declaring `info` for `p`: out is compared always, weights
/// and lse where `info` declares them. A reported error (dense problems
/// without sinks) is explained by the hypotheses under which the rows its
/// message names (reported_rows) are empty: all of them, or the first. Empty
/// when `got` is neither ok nor such an error, or its sizes do not fit `p`.
/// Throws what oracle() throws for `p`.
std::vector<std::string> diagnose(const Problem& p, const ForwardResult& got, const ImplInfo& info);

/// The rows [b, h, i] of `p` an error message names, as "b=1, h=0, i=2" or
/// "[1, 0, 2]", in the order named, without repeats and rows outside `p`.
std::vector<std::array<int64_t, 3>> reported_rows(std::string_view message, const Problem& p);

/// Calls `impl` on `p` once more and diagnoses its output; empty when it
/// throws or answers neither ok nor an error diagnose() explains. Never
/// throws. Unconfirmed: the runner uses the FailureRecord overload.
std::vector<std::string> diagnose_failure(const Implementation& impl, const Problem& p);

/// What the runner keeps of a failed property for its diagnosis.
struct FailureRecord {
  Problem shrunk;                      ///< the shrunk case's problem
  std::optional<Problem> shrunk_call;  ///< the problem of the failing call (derived)
  /// The first failing case RapidCheck (or the size search) found, before
  /// shrinking, and its failing call; nullopt when the shrunk case is it.
  std::optional<Problem> unshrunk;
  std::optional<Problem> unshrunk_call;
};

/// The diagnosis of a failure: the names diagnose_failure gives the shrunk
/// problem (or, when none, its failing call) that also explain the unshrunk
/// case or its failing call; without an unshrunk case, or one too large to
/// diagnose cheaply, those that also explain nearby_problem() of the
/// diagnosed problem. When neither the shrunk problem nor its call has a
/// name (a case too small to tell the bug from the correct answer), the
/// names of the unshrunk case (or its call), else of the shrunk problem
/// with Q magnified 4 times, that nearby_problem() of it confirms. Never
/// throws.
std::vector<std::string> diagnose_failure(const Implementation& impl, const FailureRecord& f);

/// A problem drawn near `p`: the same shape, masks and parameters, each
/// value of Q, K and V moved by a deterministic pseudo-random amount of at
/// most 1/8 of its magnitude plus 1/8, rounded to its format.
Problem nearby_problem(const Problem& p);

/// The report's lines for a diagnosis, each "  diagnosis: <description>\n",
/// or the one line "  diagnosis: no known bug class explains it\n".
std::string describe_diagnosis(const std::vector<std::string>& names);

}  // namespace attncheck
