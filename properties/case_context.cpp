// CaseContext (properties/case_context.h): an implementation called
// safely, the reference tier chosen, a case's verdict recorded; and the
// helpers the families share.

#include <algorithm>
#include <limits>
#include <cstdlib>
#include <exception>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/features.h"
#include "properties/case_context.h"

namespace attncheck {

std::optional<std::string> needs_weights(const ImplInfo& info) {
  if (info.has(ATTNCHECK_FEATURE_WEIGHTS) || !info.limits.dv_equals_dk) return std::nullopt;
  return "the implementation returns no weights and its limits (dv = dk) keep V = I from "
         "showing them";
}

std::optional<std::string> always_applies(const ImplInfo&, DType) { return std::nullopt; }

SkipFn needs_features(Features features, std::string what) {
  return [features, what](const ImplInfo& info, DType) -> std::optional<std::string> {
    if (info.has(features)) return std::nullopt;
    return "the implementation does not declare " + what;
  };
}

void CaseContext::require_declared(const Problem& p) {
  const std::string part = undeclared_serving_part(info(), p);
  if (part.empty()) return;
  fail(fmt::format("attncheck drew a problem with {}, which {} does not declare: a defect of "
                   "attncheck, not of the implementation (please report it)",
                   part, info().name));
}

ForwardResult CaseContext::call(const Problem& p) {
  last_call_is_case_ = current_ && &p == &current_->problem;
  if (last_call_is_case_) {
    last_call_.reset();
  } else {
    last_call_ = std::make_shared<const Problem>(p);
  }
  return call_kept(p);
}

ForwardResult CaseContext::call(Problem&& p) {
  return call(std::make_shared<const Problem>(std::move(p)));
}

ForwardResult CaseContext::call(std::shared_ptr<const Problem> p) {
  last_call_is_case_ = false;
  last_call_ = std::move(p);
  return call_kept(*last_call_);
}

ForwardResult CaseContext::call_kept(const Problem& p) {
  require_declared(p);
  exercise(p);
  ForwardResult r;
  try {
    r = impl_.forward(p);
  } catch (const ImplementationDied& e) {
    fail(e.what(), true, e.signal());
  } catch (const std::exception& e) {
    fail(fmt::format("the implementation threw: {}", e.what()));
  } catch (...) {
    fail("the implementation threw a non-standard exception");
  }
  if (r.status == Status::unsupported) refused(p);
  if (r.status == Status::ok) {
    const auto n_paths = static_cast<int>(info().paths.size());
    // Replay: a call that names no path is judged by the fixture's.
    if (r.path == -1 && !replay_path.empty()) {
      for (int k = 0; k < n_paths; ++k)
        if (info().paths[static_cast<size_t>(k)].name == replay_path) r.path = k;
    }
    if (r.path < -1 || r.path >= n_paths) {
      fail(fmt::format("the call says it took path {}, but the implementation declares {} path{}",
                       r.path, n_paths, n_paths == 1 ? "" : "s"));
    }
    case_paths_.push_back(r.path);
    for (ArrayKind kind : returned_kinds(info(), kForwardKinds)) {
      const size_t got = array_of(r, kind).size();
      if (got != static_cast<size_t>(array_size(kind, p))) {
        fail(fmt::format("{} has {} elements, expected {}", array_name(kind), got,
                         array_size(kind, p)));
      }
    }
  }
  if (keeps_calls() && r.status != Status::unsupported) {
    case_calls_.push_back({last_call_is_case_ ? nullptr : last_call_, r});
  }
  return r;
}

ForwardResult CaseContext::call_ok(const Problem& p) { return answered(call(p)); }

ForwardResult CaseContext::call_ok(Problem&& p) { return answered(call(std::move(p))); }

ForwardResult CaseContext::call_ok(std::shared_ptr<const Problem> p) {
  return answered(call(std::move(p)));
}

ForwardResult CaseContext::answered(ForwardResult r) {
  if (r.status == Status::error) {
    fail("reported an error on a problem without empty rows: " + r.error);
  }
  return r;
}

namespace {

// Problems from this cost (SizeShape::cost's units) up are referenced by
// the enclosure where it applies: below it the certified oracle is cheap
// (the small generator stays under 2^17: 4 x 4 x 19 x 19 x 18).
constexpr int64_t kEnclosureFrom = int64_t{1} << 16;

// SPEC 4: an enclosure judges only when it is at most 1/100 of every
// tolerance it is compared with wide.
bool narrow_enough(const OracleResult& e, const Tolerances& t) {
  const auto fits = [](const std::vector<double>& radius, const std::vector<double>& tol) {
    for (size_t k = 0; k < radius.size(); ++k)
      if (radius[k] > 0 && !(radius[k] * 100 <= tol[k])) return false;
    return true;
  };
  return fits(e.out_radius, t.out) && fits(e.weights_radius, t.weights) &&
         fits(e.lse_radius, t.lse);
}

// The same for AsAccurateAsBaseline, which compares outputs only, on the
// rows it judges: beyond the usual tolerance (`usual`) and within T^L's.
bool narrow_enough_beyond(const Problem& p, const OracleResult& e, const Tolerances& usual,
                          const Tolerances& at_limit) {
  for (size_t k = 0; k < e.out_radius.size(); ++k) {
    const size_t row = k / static_cast<size_t>(p.dv);  // out is [b][h][tq][dv], rows [b][h][tq]
    if (!usual.ill_conditioned[row] || at_limit.ill_conditioned[row]) continue;
    if (e.out_radius[k] > 0 && !(e.out_radius[k] * 100 <= at_limit.out[k])) return false;
  }
  return true;
}

}  // namespace

PrecisionTraits CaseContext::judging_precision(const Problem& p) const {
  if (case_paths_.empty()) return info().precision;
  PrecisionTraits t = precision_of(info(), case_paths_.front());
  for (int path : case_paths_)
    if (path != case_paths_.front()) t = loosest(t, precision_of(info(), path), combo_of(p).kv);
  return t;
}

bool CaseContext::calls_may_differ() const {
  if (info().has(ATTNCHECK_FEATURE_NONDETERMINISTIC)) return true;
  for (int path : case_paths_)
    if (path != case_paths_.front()) return true;
  return false;
}

std::string CaseContext::last_path_name() const {
  if (case_paths_.empty() || case_paths_.back() < 0) return "";
  return info().paths[static_cast<size_t>(case_paths_.back())].name;
}

std::pair<OracleResult, Tolerances> CaseContext::reference(const Problem& p) {
  const PrecisionTraits precision = judging_precision(p);
  // The enclosure's width is a few dk units of double roundoff: too wide
  // for implementations that accumulate in f64 themselves.
  if (p.score_elements() * (p.dk + p.dv) >= kEnclosureFrom && precision.accum != DType::f64 &&
      !enclosure_unsupported(p)) {
    OracleResult e = enclose(p);
    Tolerances t = tolerances(p, e, precision);
    if (t.ill_conditioned_rows > 0) discard(kBeyondPrecision);
    if (narrow_enough(e, t)) {
      last_tier_ = OracleResult::Tier::enclosure;
      return {std::move(e), std::move(t)};
    }
  }
  last_tier_ = OracleResult::Tier::certified;
  OracleResult o = oracle(p);
  if (!o.uncertified.empty()) discard("oracle could not certify a value");
  Tolerances t = tolerances(p, o, precision);
  if (t.ill_conditioned_rows > 0) discard(kBeyondPrecision);
  return {std::move(o), std::move(t)};
}

CaseContext::BeyondReference CaseContext::reference_beyond(const Problem& p) {
  const PrecisionTraits precision = judging_precision(p);
  BeyondReference r;
  // The usual tolerances first: a case with no row beyond them has nothing
  // to judge here, and T^L is not needed.
  const auto judge_with = [&](OracleResult o) {
    r.usual = tolerances(p, o, precision);
    if (r.usual.ill_conditioned_rows > 0) {
      r.at_limit = tolerances(p, o, precision, true);
      case_beyond_precision = true;
    }
    r.o = std::move(o);
  };
  if (!p.varlen() && p.score_elements() * (p.dk + p.dv) >= kEnclosureFrom &&
      precision.accum != DType::f64 && !enclosure_unsupported(p)) {
    judge_with(enclose(p));
    if (r.usual.ill_conditioned_rows == 0 || narrow_enough_beyond(p, r.o, r.usual, r.at_limit)) {
      last_tier_ = OracleResult::Tier::enclosure;
      return r;
    }
  }
  last_tier_ = OracleResult::Tier::certified;
  OracleResult o = oracle(p);
  if (!o.uncertified.empty()) discard("oracle could not certify a value");
  judge_with(std::move(o));
  return r;
}

void CaseContext::screen(const Problem& p) {
  // Before any call no path is known: only a shape beyond even the
  // tightest path's analysis is skipped.
  PrecisionTraits tight = info().precision;
  for (const ImplPath& path : info().paths) tight = tightest(tight, path.precision, combo_of(p).kv);
  if (size_ && beyond_first_order_by_length(p, tight)) {
    discard(kBeyondPrecision);
  }
}

void CaseContext::expect(const Comparison& c, const std::string& what) {
  if (c.ok()) {
    passed(c.max_budget_used);
    return;
  }
  // A tolerance below the smallest normal double is not a slip: the bound
  // of SPEC 4 for that element is its underflow terms alone, the terms
  // proportional to the magnitudes it is computed from being zero.
  const bool tiny = std::any_of(c.failures.begin(), c.failures.end(), [](const ElementCheck& e) {
    return e.tolerance < std::numeric_limits<double>::min();
  });
  fail(fmt::format("{}: {} of {} elements out of tolerance, the worst first:\n{}{}{}", what,
                   c.failed, c.checked, c.describe_failures(),
                   tiny ? "  (a tolerance below 2.2e-308 is SPEC 4's bound with only its underflow "
                          "terms: the magnitudes this element is computed from are zero, so its "
                          "answer must be exact but for subnormals)\n"
                        : "",
                   last_tier_ == OracleResult::Tier::enclosure
                       ? "  (reference: the enclosure tier of SPEC 4; expected +- radius "
                         "contains the exact value)\n"
                       : ""));
}

void CaseContext::require(const Comparison& c, const std::string& what) {
  if (!c.ok()) expect(c, what);  // fails
  max_budget_used = std::max(max_budget_used, c.max_budget_used);
}

void CaseContext::fail(const std::string& message) { fail(message, false); }

void CaseContext::fail(const std::string& message, bool died, int signal) {
  throw CaseEnded{record_failure(message, died, signal)};
}

Verdict CaseContext::record_failure(const std::string& message, bool died, int signal) {
  PendingFailure f;
  if (current_) f.failed_case = *current_;
  f.failed_call = last_call_is_case_ && current_
                      ? std::make_shared<const Problem>(current_->problem)
                      : last_call_;
  f.path = last_path_name();
  f.message = message;
  f.died = died;
  f.signal = signal;
  pending_ = std::move(f);
  // Without known findings every failure counts: recorded at once.
  if (!keeps_calls()) commit_failure();
  return Verdict::fail(message, died, signal);
}

void CaseContext::commit_failure() {
  if (!pending_) return;
  PendingFailure& f = *pending_;
  // Shrinking accepts every failing candidate it finds, so the last failure
  // recorded is the shrunk counterexample.
  if (f.failed_case) failed_case = std::move(f.failed_case);
  failed_call = std::move(f.failed_call);
  failed_path = std::move(f.path);
  if (failures++ == 0) {
    first_failed_case = failed_case;
    first_failed_call = failed_call;
  }
  failure_message = std::move(f.message);
  failure_died = f.died;
  failure_signal = f.signal;
  failure_also_explained = std::move(f.also_explained);
  pending_.reset();
}

std::optional<Case> CaseContext::drop_failure() {
  std::optional<Case> c;
  if (pending_) c = std::move(pending_->failed_case);
  pending_.reset();
  return c;
}

void CaseContext::pending_also_explained(std::vector<std::string> names) {
  if (pending_) pending_->also_explained = std::move(names);
}

void CaseContext::discard(const std::string& reason) {
  ++discarded;
  ++discard_reasons[reason];
  last_discard_reason = reason;
  if (reason == kBeyondPrecision) case_beyond_precision = true;
  throw CaseEnded{Verdict::discard(reason)};
}

uint64_t CaseContext::feature_bit(const std::string& feature) {
  auto& names = refusals_.features;
  const auto it = std::find(names.begin(), names.end(), feature);
  const size_t i = static_cast<size_t>(it - names.begin());
  if (i >= 64) return 0;
  if (it == names.end()) names.push_back(feature);
  return uint64_t{1} << i;
}

void CaseContext::exercise(const Problem& p, bool backward) {
  case_called_ = true;
  for (const std::string& f : features_exercised(p)) case_features_ |= feature_bit(f);
  if (backward) case_features_ |= feature_bit("the backward pass (BACKWARD)");
  // One combination is every case's: refusing it is refusing everything,
  // which the mostly-discarded rule reports.
  if (!config_.combo && info().combos_with_output(dtype_).size() > 1) {
    const uint64_t bit = feature_bit("the formats " + combo_name(combo_of(p)));
    case_features_ |= bit;
    refusals_.need_contrast |= bit;
  }
}

void CaseContext::refused(const Problem& p, bool backward) {
  exercise(p, backward);
  case_refused_ = true;
  discard("unsupported by the implementation");
}

void CaseContext::end_case() {
  if (case_called_) {
    Refusals::Count& c = refusals_.by_set[case_features_];
    ++c.cases;
    if (case_refused_) ++c.refused;
  }
  case_features_ = 0;
  case_called_ = case_refused_ = false;
}

void CaseContext::passed(double budget_used) {
  ++cases;
  max_budget_used = std::max(max_budget_used, budget_used);
}

void expect_unseen_keys_ignored(CaseContext& ctx, const Problem& p, const ForwardResult& r,
                                int64_t b, int64_t g, const std::vector<int64_t>& keys,
                                const std::function<void(Problem&, int64_t)>& change,
                                const std::string& what) {
  if (keys.empty()) {
    ctx.passed(0);
    return;
  }
  Problem changed = p;
  for (int64_t j : keys) change(changed, j);
  const ForwardResult r2 = ctx.call_ok(changed);
  Comparison c;
  compare_array(c, ArrayKind::out, p, r.out, r2.out, {}, CompareMode::bitwise, "after the change",
                [&](int64_t bb, int64_t h, int64_t i) {
                  if (bb != b || p.kv_head(h) != g) return false;
                  for (int64_t j : keys)
                    if (p.allowed(b, h, i, j)) return false;
                  return true;
                });
  if (ctx.calls_may_differ() && !c.ok()) {
    // Atomic reductions are legitimate: bitwise becomes within tolerance.
    const auto [o, t] = ctx.reference(p);
    Comparison tc;
    compare_array(tc, ArrayKind::out, p, r.out, r2.out, t.out, CompareMode::pairwise,
                  "after the change",
                  [&](int64_t bb, int64_t h, int64_t) { return bb == b && p.kv_head(h) == g; });
    ctx.expect(tc, what);
    return;
  }
  ctx.expect(c, what);
}

std::optional<std::string> rows_have_keys(const Problem& p) {
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seq_tq(b); ++i)
        if (p.allowed_count(b, h, i) == 0 && p.sink.empty()) {
          return fmt::format("row [{}, {}, {}] has no allowed key (only EmptyRowsAreRejected "
                             "makes empty rows)",
                             b, h, i);
        }
  return std::nullopt;
}

NotACaseFn rows_have_keys_and(NotACaseFn rule) {
  return [rule = std::move(rule)](const Problem& p) -> std::optional<std::string> {
    if (auto why = rows_have_keys(p)) return why;
    return rule(p);
  };
}

PropertyDef case_property(std::string name, std::string statement, int default_cases,
                          SkipFn skip, DrawFn draw, JudgeFn judge, ValidateArgsFn validate_args,
                          AtSize at_size) {
  PropertyDef d;
  d.name = std::move(name);
  d.statement = std::move(statement);
  d.default_cases = default_cases;
  d.skip_reason = std::move(skip);
  d.draw = std::move(draw);
  d.judge = std::move(judge);
  d.validate_args = std::move(validate_args);
  d.not_a_case = rows_have_keys;
  d.at_size = at_size;
  return d;
}

std::optional<PropertyOutcome> object_outcome(const PropertyDef& prop, const Implementation& impl,
                                              DType dtype) {
  if (!prop.object_verdict) return std::nullopt;
  const auto verdict = prop.object_verdict(impl);
  if (!verdict) return std::nullopt;
  PropertyOutcome out = blank_outcome(prop, impl, dtype);
  out.status = verdict->status;
  out.message = verdict->message;
  return out;
}

PropertyOutcome blank_outcome(const PropertyDef& prop, const Implementation& impl,
                              DType dtype) {
  PropertyOutcome out;
  out.property = prop.name;
  out.impl = impl.info().name;
  out.kind = impl.info().kind;
  out.dtype = dtype;
  return out;
}

}  // namespace attncheck
