#pragma once
// What a property's judge works with: a case, the CaseContext that calls
// the implementation safely, chooses the reference tier and records the
// case's verdict, the helpers the families share, and the registration of
// a property in the catalog. The engine that drives them (RapidCheck, the
// real-size phase, shrinking, reports, replay) is run/'s.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/compare.h"
#include "attncheck/fixture.h"
#include "host/isolation.h"
#include "attncheck/oracle.h"
#include "properties/property_def.h"
#include "judge/tolerance.h"
#include "core/transforms.h"
#include "properties/args.h"
#include "properties/gen/generators.h"
#include "properties/verdict.h"

namespace attncheck {

/// One drawn case: the problem and what the property drew beyond it (a
/// permutation, a row, coefficients...), enough to judge it again.
struct Case {
  Problem problem;
  nlohmann::json args = nlohmann::json::object();
};

/// The reason a case is discarded as beyond the declared precision (SPEC 4).
inline constexpr const char* kBeyondPrecision = "ill-conditioned (beyond first-order analysis)";

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
  void begin(const Case& c) {
    current_ = &c;
    case_paths_.clear();
    case_calls_.clear();
    pending_.reset();
    last_call_.reset();
    last_call_is_case_ = false;
    case_beyond_precision = false;
    end_case();
  }

  /// Calls forward. An exception thrown by the implementation, or a result
  /// of the wrong size, or a path it does not declare, fails the case;
  /// ATTNCHECK_UNSUPPORTED discards it. The path the call took (SPEC 4.1)
  /// is recorded: reference() judges by it.
  /// A problem outside the declaration is never handed over (require_declared).
  /// The problem is kept for a failure report (failed_call): the case's own
  /// problem by reference, any other as a copy.
  ForwardResult call(const Problem& p);
  /// The same for a derived problem the judge hands over: kept without a
  /// copy. At real sizes a derived problem can be many times the case
  /// (GroupedQueryEquivalence's MHA problem, the group size times its K/V:
  /// a gigabyte at the thorough cap), and a copy per call doubled it.
  ForwardResult call(Problem&& p);
  /// The same for a derived problem the judge reads after the call (its
  /// reference, its shape): shared, not copied. RowSumsToOne's V = I at
  /// real sizes is up to a gigabyte, and its copy was a quarter of the
  /// property's time.
  ForwardResult call(std::shared_ptr<const Problem> p);

  /// Fails the case, as a defect of attncheck, when p has a serving part
  /// or a format combination the implementation does not declare (SPEC
  /// 5.1: the harness never asks for one). Every call goes through it, a
  /// built-in's too, so a generator that strays shows in the self-tests
  /// and not only on plugins, whose loader refuses such a problem.
  void require_declared(const Problem& p);

  /// Like call(), and a reported error is a failure too.
  ForwardResult call_ok(const Problem& p);
  ForwardResult call_ok(Problem&& p);
  ForwardResult call_ok(std::shared_ptr<const Problem> p);

  /// The reference and tolerances of p; discards the case when any row is
  /// ill-conditioned (SPEC 4: counted, never passed) or the oracle could
  /// not certify a value. At real sizes the reference is the enclosure
  /// (oracle.h: enclose()) where it applies and is at most 1/100 of every
  /// tolerance wide, else the certified oracle.
  /// The precision is that of the path the case's calls took (SPEC 4.1):
  /// the declaration's own when a call named none, the loosest of them,
  /// component by component, when they took different ones.
  std::pair<OracleResult, Tolerances> reference(const Problem& p);

  /// AsAccurateAsBaseline's reference (SPEC 2): the reference of p, its
  /// tier chosen as reference(p) chooses it, with the usual tolerances
  /// (whose ill-conditioned rows are the rows it judges) and T^L
  /// (tolerances(..., at_limit = true): ill-conditioned only where scores
  /// or Q overflow their format), computed only when some row is
  /// ill-conditioned (else left empty). No case is discarded for an
  /// ill-conditioned row; the enclosure is taken when it is at most 1/100
  /// of T^L wide on every row judged.
  struct BeyondReference {
    OracleResult o;
    Tolerances usual, at_limit;
  };
  BeyondReference reference_beyond(const Problem& p);

  /// The precision reference(p) judges by (see there).
  PrecisionTraits judging_precision(const Problem& p) const;

  /// Whether two calls of this case may differ in their bits: the
  /// implementation declares ATTNCHECK_FEATURE_NONDETERMINISTIC, or the
  /// calls took different paths (SPEC 4.1). A property that compares two
  /// calls bitwise then compares them within tolerance.
  bool calls_may_differ() const;

  /// The name of the path the last call took ("" when it named none).
  std::string last_path_name() const;

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

  /// Fails the current case with this message: records the failure and
  /// ends the case (throws CaseEnded, properties/verdict.h).
  [[noreturn]] void fail(const std::string& message);
  /// The same; `died`: the implementation crashed or hung in the call
  /// (isolation.h), so there is no output to diagnose; `signal`: the one
  /// its process died of (ImplementationDied::signal), or 0.
  [[noreturn]] void fail(const std::string& message, bool died, int signal = 0);
  /// Records the current case's failure (the counterexample, its failing
  /// call and path, the message) without ending it, and returns the
  /// verdict: fail() ends a case with it; run/judge_once.h records an
  /// exception the judge let through.
  Verdict record_failure(const std::string& message, bool died = false, int signal = 0);

  /// Discards the current case, counted under `reason` (throws CaseEnded).
  [[noreturn]] void discard(const std::string& reason);

  /// Discards the current case because the implementation answered
  /// UNSUPPORTED to a call on p (`backward`: a backward call), counted
  /// under "unsupported by the implementation" and in refusals() (throws).
  [[noreturn]] void refused(const Problem& p, bool backward = false);

  /// Notes that the current case calls the implementation on p, for
  /// refusals(); call() does, and so does every other call of a case.
  void exercise(const Problem& p, bool backward = false);

  /// The cases that called the implementation and how many of them it
  /// refused (answered UNSUPPORTED), per set of declared features their
  /// calls exercised: features_exercised's (core/features.h), the backward
  /// pass, and the formats when the run draws among several combinations.
  struct Refusals {
    struct Count {
      int cases = 0, refused = 0;
    };
    /// The features seen; bit i of a set is features[i]. At most 64 (about
    /// 20 exist); later ones are not counted.
    std::vector<std::string> features;
    /// The features (bits) that a property may exercise in every case
    /// without being its subject: the formats. The refusal rule blames
    /// them only against cases without them.
    uint64_t need_contrast = 0;
    std::map<uint64_t, Count> by_set;
  };
  /// The refusals so far, the current case's included.
  const Refusals& refusals() {
    end_case();
    return refusals_;
  }

  /// Records a passing case's budget used.
  void passed(double budget_used);

  /// Set by replay: the dispatch path the fixture's failing call took
  /// (SPEC 4.1), which judges a call that names none; "" = none recorded.
  std::string replay_path;

  // Filled while running, read by the runner.
  int cases = 0;
  int discarded = 0;
  std::map<std::string, int> discard_reasons;
  /// The reason of the latest discard (the real-size phase sorts its
  /// shapes by it); "" until one.
  std::string last_discard_reason;
  /// The current case is beyond the declared precision (SPEC 4's
  /// first-order limit): discarded as ill-conditioned, or judged by
  /// reference_beyond() on rows some of which are. Reset by begin().
  bool case_beyond_precision = false;
  double max_budget_used = 0;
  std::optional<Case> failed_case;
  /// The problem of the last call before a failure: a metamorphic
  /// property's derived problem, when that is where the bug showed. Shared
  /// with the call's own record, not copied.
  std::shared_ptr<const Problem> failed_call;
  std::string failure_message;
  bool failure_died = false;  ///< the recorded failure was a crash or a hang
  int failure_signal = 0;     ///< a crash: the signal its process died of, or 0
  /// The path the failing call took (SPEC 4.1), "" when it named none.
  std::string failed_path;
  /// The first failure recorded (before shrinking) and its failing call,
  /// and how many failures were recorded (1: the shrunk case is the first).
  std::optional<Case> first_failed_case;
  std::shared_ptr<const Problem> first_failed_call;
  int failures = 0;
  /// The recorded failure's calls that a known finding explains, though
  /// other calls of the case it does not ("F1 (f16_pv_sum_overflow)").
  std::vector<std::string> failure_also_explained;

  // ---- Known findings (RunConfig::known_findings; run/judge_once.h) ----
  /// Whether the run has known findings: each case's calls are then kept
  /// with their results (case_calls), and a failure is recorded pending
  /// until judge_once reads it against the findings (commit_failure).
  bool keeps_calls() const { return !config_.known_findings.empty(); }
  /// What the search seeks: failures the known findings do not explain
  /// (first), or, when it found none, the ones they do (to shrink one).
  enum class Seek { unexplained, explained };
  Seek seek = Seek::unexplained;
  /// One call of the current case: its problem (nullptr: the case's own)
  /// and what the implementation answered.
  struct KeptCall {
    std::shared_ptr<const Problem> problem;
    ForwardResult result;
  };
  const std::vector<KeptCall>& case_calls() const { return case_calls_; }
  /// Makes the pending failure the recorded one (failed_case, ...).
  void commit_failure();
  /// Drops the pending failure, returning its case (moved, not copied).
  std::optional<Case> drop_failure();
  /// Sets the pending failure's also-explained findings.
  void pending_also_explained(std::vector<std::string> names);
  /// Failures set aside because the known findings explain them, counted,
  /// and the first one (its finding's index in known_findings, and whether
  /// it was found at real size).
  int explained_failures = 0;
  std::optional<Case> first_explained_case;
  size_t explained_finding = 0;
  bool explained_at_size = false;
  /// Seeking explained failures: the first failure met that the known
  /// findings do not explain (a new bug found while shrinking the old one).
  std::optional<Case> unexplained_set_aside;
  /// Whether the real-size phase's shape is set (ctx is at real size).
  bool at_real_size() const { return size_.has_value(); }

 private:
  const Implementation& impl_;
  DType dtype_;
  const RunConfig& config_;
  const Case* current_ = nullptr;
  std::optional<gen::SizeShape> size_;
  OracleResult::Tier last_tier_ = OracleResult::Tier::certified;
  // The current case's last call: its own problem (last_call_is_case_,
  // which current_ holds) or a derived one, copied when lent (it may not
  // outlive the call) or taken when handed over.
  std::shared_ptr<const Problem> last_call_;
  bool last_call_is_case_ = false;
  std::vector<int> case_paths_;  // the path of each call of the current case
  std::vector<KeptCall> case_calls_;  // with known findings: the case's calls
  // A failure recorded by the judge, pending judge_once's reading when the
  // run has known findings (committed at once otherwise).
  struct PendingFailure {
    std::optional<Case> failed_case;
    std::shared_ptr<const Problem> failed_call;
    std::string message, path;
    bool died = false;
    int signal = 0;
    std::vector<std::string> also_explained;
  };
  std::optional<PendingFailure> pending_;
  // call()'s body, p kept already; call_ok()'s check (an error fails).
  ForwardResult call_kept(const Problem& p);
  ForwardResult answered(ForwardResult r);
  // Folds the current case into refusals_ (once).
  void end_case();
  // The bit of `feature` in refusals_, 0 past 64 features.
  uint64_t feature_bit(const std::string& feature);
  Refusals refusals_;
  uint64_t case_features_ = 0;  // the features the current case's calls exercised
  bool case_called_ = false;    // the current case called the implementation
  bool case_refused_ = false;   // and it refused one of them
};

/// A property checked case by case: RapidCheck draws and shrinks cases, the
/// judge decides each; replay judges a fixture's case again, once
/// `validate_args` (when given) accepted its args. not_a_case is
/// rows_have_keys; slice_args empty.
PropertyDef case_property(std::string name, std::string statement, int default_cases,
                          SkipFn skip, DrawFn draw, JudgeFn judge,
                          ValidateArgsFn validate_args = {}, AtSize at_size = AtSize::no);

/// SPEC 3's rule for every property but EmptyRowsAreRejected: each row has
/// an allowed key (or the head a sink). Why p breaks it, or nullopt.
std::optional<std::string> rows_have_keys(const Problem& p);

/// not_a_case of a property whose problems also satisfy `rule`: p breaks
/// rows_have_keys or, when it does not, `rule` says why p is no case.
NotACaseFn rows_have_keys_and(NotACaseFn rule);

/// Never skips.
std::optional<std::string> always_applies(const ImplInfo&, DType);

/// Skip reason unless the implementation declares every bit of `features`.
SkipFn needs_features(Features features, std::string what);

/// An outcome of `prop` on `impl` with nothing filled in yet.
PropertyOutcome blank_outcome(const PropertyDef& prop, const Implementation& impl, DType dtype);

/// The outcome of `prop`'s object_verdict on `impl` (a property for
/// layers skipping what is not one), or nullopt when it goes on to its
/// cases. For the run and for replay alike.
std::optional<PropertyOutcome> object_outcome(const PropertyDef& prop, const Implementation& impl,
                                              DType dtype);

/// The problem printed for a person: shapes and flags, and for small cases
/// the matrices.
std::string describe_problem(const Problem& p);

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

/// MatchesOracle for a packed or paged problem (serving.cpp): each sequence with
/// queries against the oracle on sequence_problem, within its tolerance.
void judge_sequences_against_oracle(CaseContext& ctx, const Problem& p, const ForwardResult& r);

namespace detail {
/// Adds a property to the catalog at static-initialisation time; use
/// ATTNCHECK_REGISTER_PROPERTY. Two properties with one name or one
/// position end the program at start-up with a message naming them.
struct PropertyRegistrar {
  PropertyRegistrar(int position, PropertyDef (*make)());
};
}  // namespace detail

}  // namespace attncheck

#define ATTNCHECK_PROPERTY_CONCAT_INNER_(a, b) a##b
#define ATTNCHECK_PROPERTY_CONCAT_(a, b) ATTNCHECK_PROPERTY_CONCAT_INNER_(a, b)

/// Registers the property `make()` returns at `position` of the catalog
/// (PropertyDef::position: SPEC section 2's order, in tens).
#define ATTNCHECK_REGISTER_PROPERTY(position, make)                        \
  static const ::attncheck::detail::PropertyRegistrar ATTNCHECK_PROPERTY_CONCAT_( \
      attncheck_property_registrar_, __LINE__)(position, make)
