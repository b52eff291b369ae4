#pragma once
// Machinery shared by the properties: calling an implementation safely,
// recording a case's verdict, and running a RapidCheck property to an
// outcome with a failure report and a fixture.

#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "attncheck/compare.h"
#include "attncheck/fixture.h"
#include "attncheck/isolation.h"
#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/tolerance.h"
#include "attncheck/transforms.h"
#include "properties/args.h"
#include "attncheck/generators.h"

namespace attncheck {

/// One drawn case: the problem and what the property drew beyond it (a
/// permutation, a row, coefficients...), enough to judge it again.
struct Case {
  Problem problem;
  nlohmann::json args = nlohmann::json::object();
};

/// State of one property run, handed to the property for each case.
class CaseContext {
 public:
  CaseContext(const Implementation& impl, DType dtype, const RunConfig& config)
      : impl_(impl), dtype_(dtype), config_(config) {}

  const Implementation& impl() const { return impl_; }
  const ImplInfo& info() const { return impl_.info(); }
  DType dtype() const { return dtype_; }
  const RunConfig& config() const { return config_; }
  /// The generator spec of the implementation in this dtype and profile
  /// (at the real-size phase's current shape, when one is set).
  gen::GenSpec spec() const {
    gen::GenSpec s = gen::spec_for(info(), dtype_, config_.profile);
    s.size = size_;
    // --dtype q=F,kv=F,out=F: every problem in that combination.
    if (config_.combo) s.combos = {*config_.combo};
    return s;
  }
  /// Sets (or clears) the real-size shape problems are drawn at.
  void set_size(std::optional<gen::SizeShape> s) { size_ = std::move(s); }

  /// Starts judging `c`; a failure records it as the counterexample.
  void begin(const Case& c) { current_ = &c; }

  /// Calls forward. An exception thrown by the implementation, or a result
  /// of the wrong size, fails the case; ATTNCHECK_UNSUPPORTED discards it.
  /// A problem outside the declaration is never handed over (require_declared).
  ForwardResult call(const Problem& p);

  /// Fails the case, as a defect of attncheck, when p has a version 2 part
  /// or a format combination the implementation does not declare (SPEC
  /// 5.1: the harness never asks for one). Every call goes through it, a
  /// built-in's too, so a generator that strays shows in the self-tests
  /// and not only on plugins, whose loader refuses such a problem.
  void require_declared(const Problem& p);

  /// Like call(), and a reported error is a failure too.
  ForwardResult call_ok(const Problem& p);

  /// The reference and tolerances of p; discards the case when any row is
  /// ill-conditioned (SPEC 4: counted, never passed) or the oracle could
  /// not certify a value. At real sizes the reference is the enclosure
  /// (oracle.h: enclose()) where it applies and is at most 1/100 of every
  /// tolerance wide, else the certified oracle.
  std::pair<OracleResult, Tolerances> reference(const Problem& p);

  /// At real sizes, discards the case before any call when the lengths of
  /// p's rows alone put one beyond the first-order analysis of the
  /// declared precision (tolerance.h: beyond_first_order_by_length), as
  /// reference(p) would after the calls, which at these sizes are the cost
  /// (LibTorch's bf16 products: seconds each, for a case that cannot be
  /// judged). A judge that always compares against p's tolerances asks
  /// first; exact judges do not (they judge such shapes). Small problems
  /// keep their order: call, then reference (a failure before the reference
  /// is still a failure there).
  void screen(const Problem& p);

  /// Fails the case when the comparison failed, else records its budget.
  void expect(const Comparison& c, const std::string& what);

  /// Like expect(), for one of several comparisons of a case: records the
  /// budget used but not a passed case (the judge calls passed() or
  /// expect() once at its end).
  void require(const Comparison& c, const std::string& what);

  /// Fails the current case with this message (throws).
  [[noreturn]] void fail(const std::string& message);
  /// The same; `died`: the implementation crashed or hung in the call
  /// (isolation.h), so there is no output to diagnose.
  [[noreturn]] void fail(const std::string& message, bool died);

  /// Discards the current case, counted under `reason` (throws).
  [[noreturn]] void discard(const std::string& reason);

  /// Records a passing case's budget used.
  void passed(double budget_used);

  // Filled while running, read by the runner.
  int cases = 0;
  int discarded = 0;
  std::map<std::string, int> discard_reasons;
  double max_budget_used = 0;
  std::optional<Case> failed_case;
  /// The problem of the last call before a failure: a metamorphic
  /// property's derived problem, when that is where the bug showed.
  std::optional<Problem> failed_call;
  std::string failure_message;
  bool failure_died = false;  ///< the recorded failure was a crash or a hang
  /// The first failure recorded (before shrinking) and its failing call,
  /// and how many failures were recorded (1: the shrunk case is the first).
  std::optional<Case> first_failed_case;
  std::optional<Problem> first_failed_call;
  int failures = 0;

 private:
  const Implementation& impl_;
  DType dtype_;
  const RunConfig& config_;
  const Case* current_ = nullptr;
  std::optional<gen::SizeShape> size_;
  OracleResult::Tier last_tier_ = OracleResult::Tier::certified;
  std::optional<Problem> last_call_;  // copied: derived problems are often temporaries
};

/// Draws a case with RapidCheck generators (only inside a property run).
using DrawFn = std::function<Case(CaseContext&)>;
/// Judges a case: returns after ctx.passed(), or fails / discards (throws).
using JudgeFn = std::function<void(CaseContext&, const Case&)>;
/// Why a property does not apply, or nullopt.
using SkipFn = std::function<std::optional<std::string>(const ImplInfo&, DType)>;

/// Checks a fixture's args before replay judges them (PropertyDef::validate_args).
using ValidateArgsFn = std::function<void(const Fixture&)>;

/// A property checked case by case: RapidCheck draws and shrinks cases, the
/// judge decides each; replay judges a fixture's case again, once
/// `validate_args` (when given) accepted its args.
PropertyDef case_property(std::string name, std::string statement, int default_cases,
                          SkipFn skip, DrawFn draw, JudgeFn judge,
                          ValidateArgsFn validate_args = {}, AtSize at_size = AtSize::no);

/// What the real-size phase (real_sizes.cpp) found.
struct SizePhase {
  bool failed = false;
  int cases = 0;      ///< shapes judged
  int discarded = 0;  ///< shapes whose case was discarded
  std::string found;  ///< on failure: the shape it was found at, and the search
};

/// After the small problems passed: the property's real-size shapes, each
/// one case drawn and judged (no RapidCheck shrinking); a failure is
/// shrunk by searching the smallest failing length, head dims, heads and
/// batch (SPEC 3), and left in ctx as the counterexample.
SizePhase run_real_sizes(const std::string& property, AtSize at_size, CaseContext& ctx,
                         const DrawFn& draw, const JudgeFn& judge, uint64_t seed);

/// Never skips.
std::optional<std::string> always_applies(const ImplInfo&, DType);

/// Skip reason unless the implementation declares every bit of `features`.
SkipFn needs_features(Features features, std::string what);

/// An outcome of `prop` on `impl` with nothing filled in yet.
PropertyOutcome blank_outcome(const PropertyDef& prop, const Implementation& impl, DType dtype);

/// The problem printed for a person: shapes and flags, and for small cases
/// the matrices.
std::string describe_problem(const Problem& p);

/// The number of cases a property runs under a config.
int case_budget(const PropertyDef& prop, const RunConfig& config);

/// Skip reason for properties that read weights: none when the
/// implementation returns them or its limits allow dv = tk (SPEC 2: with
/// V = the identity, output row i is weight row i).
std::optional<std::string> needs_weights(const ImplInfo& info);

/// The key sets a row can not see are changed (by `change`, applied to the
/// K/V head g of batch b at each key of `keys`); every row of (b, query
/// heads of g) that sees none of them must be bitwise unchanged.
void expect_unseen_keys_ignored(CaseContext& ctx, const Problem& p, const ForwardResult& r,
                                int64_t b, int64_t g, const std::vector<int64_t>& keys,
                                const std::function<void(Problem&, int64_t j)>& change,
                                const std::string& what);

// The catalog's entries, one function per property, defined in the file of
// its family.
PropertyDef matches_oracle_property();
PropertyDef row_sums_property();
PropertyDef masked_weights_property();
PropertyDef constant_values_property();
PropertyDef convex_hull_property();
PropertyDef permutation_property();
PropertyDef key_translation_property();
PropertyDef value_linearity_property();
PropertyDef variance_property();
PropertyDef empty_rows_property();
PropertyDef extreme_scores_property();
PropertyDef causal_prefix_property();
PropertyDef window_property();
PropertyDef batch_head_property();
PropertyDef gqa_property();
PropertyDef multihead_property();
PropertyDef layout_property();
PropertyDef determinism_property();
PropertyDef agreement_property();
PropertyDef gradients_property();
PropertyDef sink_property();
PropertyDef packed_property();
PropertyDef paged_property();
PropertyDef descale_property();

/// MatchesOracle for a packed or paged problem (v2.cpp): each sequence with
/// queries against the oracle on sequence_problem, within its tolerance.
void judge_sequences_against_oracle(CaseContext& ctx, const Problem& p, const ForwardResult& r);

}  // namespace attncheck
