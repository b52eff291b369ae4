// The engine's driver: one property against one implementation in one
// dtype. A case property's small problems run under RapidCheck: this file
// is the only user of rc::detail's runner and the only translation of a
// Verdict (properties/verdict.h) into RapidCheck's terms; it also draws
// the real-size phase's cases (draw_at_seed, run/driver.h). Cases are
// judged by judge_once (run/judge_once.h). A statistical property runs
// whole.

#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include "attncheck/dtype.h"
#include "attncheck/run.h"
#include "core/cancel.h"
#include "properties/case_context.h"
#include "properties/seeds.h"
#include "run/config.h"
#include "run/driver.h"
#include "properties/gen/coverage.h"
#include "run/failure_report.h"
#include "run/judge_once.h"
#include "run/real_sizes.h"
#include "run/run_property.h"
#include "run/shrink_passes.h"

namespace attncheck {
namespace {

// The one translation of a verdict (properties/verdict.h) into RapidCheck's
// terms: a failure or a discard ends the RapidCheck case with its message.
// A verdict set aside (a failure the search does not seek, run/judge_once.h)
// is a success to RapidCheck: the search goes on past it.
void to_rapidcheck(const Verdict& v) {
  if (v.failed()) RC_FAIL(v.message);
  if (v.discarded()) RC_DISCARD(v.message);
}

std::string test_id(const PropertyDef& prop, const Implementation& impl, DType dtype) {
  return fmt::format("{}/{}/{}", prop.name, impl.info().name, dtype_name(dtype));
}

// The catalog's property that judges the shapes beyond the declared
// precision (PropertyDef::judges_beyond_precision), "" when none does.
std::string_view beyond_precision_judge() {
  for (const PropertyDef& p : property_defs())
    if (p.judges_beyond_precision) return p.name;
  return "";
}

std::string discard_summary(const CaseContext& ctx) {
  std::string s;
  for (const auto& [reason, n] : ctx.discard_reasons) {
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, reason);
  }
  return s;
}

// The refusal rule (docs/properties.md): below this many cases exercising
// a feature its share of refusals says little (at 10, a kernel refusing
// 30% of them is judged refusing most with probability 0.05, one refusing
// them all always is), and 10 is reached by a feature drawn on a coin's
// toss within --cases 20, where refused cases are drawn again.
constexpr int kMinCasesToJudgeRefusals = 10;

// The declared features the implementation refused on most of the cases
// that exercised them (docs/properties.md), one phrase naming each. A
// feature is blamed when it was refused on more than half of at least
// kMinCasesToJudgeRefusals cases, and the cases without it were refused at
// most half the time; where none lacked it (the property's subject, causal
// in CausalPrefixIndependence), when `answers_plain` says the
// implementation answers the smallest problem of the run's format without
// any feature (so it is the feature it refuses, not the format; never the
// formats themselves, which refusing everything refuses too). Refusing
// nearly everything is the mostly-discarded rule's `unsupported`, not a
// feature.
// Most refused first; the cases a blamed feature explains are set aside
// before the next is sought, so features drawn with it are not blamed for
// its refusals. Empty when none.
std::string refused_features(const CaseContext::Refusals& r,
                             const std::function<bool()>& answers_plain) {
  using Count = CaseContext::Refusals::Count;
  std::map<uint64_t, Count> left = r.by_set;
  std::string s;
  for (;;) {
    Count all;
    for (const auto& [set, n] : left) {
      all.cases += n.cases;
      all.refused += n.refused;
    }
    size_t best = r.features.size();
    Count best_n;
    for (size_t i = 0; i < r.features.size(); ++i) {
      const uint64_t bit = uint64_t{1} << i;
      Count with;
      for (const auto& [set, n] : left) {
        if (!(set & bit)) continue;
        with.cases += n.cases;
        with.refused += n.refused;
      }
      const Count without{all.cases - with.cases, all.refused - with.refused};
      if (with.cases < kMinCasesToJudgeRefusals || 2 * with.refused <= with.cases) continue;
      const bool attributable = without.cases > 0 ? 2 * without.refused <= without.cases
                                                  : !(r.need_contrast & bit) && answers_plain();
      if (!attributable) continue;
      const int64_t lhs = int64_t{with.refused} * best_n.cases;
      const int64_t rhs = int64_t{best_n.refused} * with.cases;
      if (best == r.features.size() || lhs > rhs || (lhs == rhs && with.cases > best_n.cases)) {
        best = i;
        best_n = with;
      }
    }
    if (best == r.features.size()) return s;
    s += fmt::format("{}{} of {} cases with {}", s.empty() ? "" : ", ", best_n.refused,
                     best_n.cases, r.features[best]);
    const uint64_t bit = uint64_t{1} << best;
    std::erase_if(left, [bit](const auto& e) { return (e.first & bit) != 0; });
  }
}

// A property whose search met only failures the known findings explain
// (RunConfig::known_findings): the first of them shrunk, seeking explained
// failures, as RapidCheck or the size passes shrink any failure (`rerun`
// runs the small search again), and reported xfail naming its finding. A
// failure they do not explain met while shrinking is a new bug: shrunk and
// reported failed.
void settle_explained(const PropertyDef& prop, const Implementation& impl, DType dtype,
                      const RunConfig& config, CaseContext& ctx, uint64_t seed,
                      const std::function<rc::detail::TestResult()>& rerun,
                      const std::string& test_id, PropertyOutcome& out) {
  ctx.seek = CaseContext::Seek::explained;
  bool reported = false;
  if (!ctx.explained_at_size) {
    const auto result = rerun();
    rc::detail::FailureResult failure;
    if (result.match(failure)) {
      if (!ctx.failure_died) run_shrink_passes(prop, ctx);
      rc::detail::Configuration rc_config;
      rc_config.testParams.seed = seed;
      rc_config.reproduce[test_id] = failure.reproduce;
      report_failure(prop, impl, dtype, config, ctx,
                     {Reproduce::Kind::rc_params, rc::detail::configToMinimalString(rc_config)},
                     failure.numSuccess, out);
      reported = true;
    }
  } else {
    const SizePhase sizes = run_real_sizes(prop, ctx, seed);
    if (sizes.failed) {
      report_failure(prop, impl, dtype, config, ctx, {Reproduce::Kind::whole_run, {}}, -1, out,
                     sizes.found);
      reported = true;
    }
  }
  if (!reported && ctx.first_explained_case) {
    // It did not fail again (a kernel whose answers vary): the case found.
    const Case c = *ctx.first_explained_case;
    if (judge_once(prop, ctx, c).failed()) {
      report_failure(prop, impl, dtype, config, ctx, {Reproduce::Kind::whole_run, {}}, -1, out);
      reported = true;
    }
  }
  if (ctx.unexplained_set_aside || !reported) {
    ctx.seek = CaseContext::Seek::unexplained;
    if (ctx.unexplained_set_aside) {
      const Case c = std::move(*ctx.unexplained_set_aside);
      ctx.unexplained_set_aside.reset();
      if (judge_once(prop, ctx, c).failed()) {
        if (!ctx.failure_died) run_shrink_passes(prop, ctx);
        report_failure(prop, impl, dtype, config, ctx, {Reproduce::Kind::whole_run, {}}, -1, out);
        return;
      }
    }
    if (!reported) {
      out.status = PropertyStatus::failed;
      out.message = fmt::format(
          "FAILED {} on {}: {} failures the known findings explain were met, but none failed "
          "again to be shrunk (the implementation's answers vary between calls)",
          prop.name, impl.info().name, ctx.explained_failures);
      return;
    }
  }
  out.status = PropertyStatus::xfail;
  out.expected = config.known_findings[ctx.explained_finding];
}

// The coverage targets a search's draws counted ("target WHAT" and
// "reached WHAT", properties/gen/dense.cpp), in name order.
std::vector<CoverageTarget> coverage_targets(const gen::Coverage& coverage) {
  std::vector<CoverageTarget> targets;
  for (const auto& [key, drawn] : coverage.counts) {
    if (!key.starts_with("target ")) continue;
    const std::string what = key.substr(7);
    const auto reached = coverage.counts.find("reached " + what);
    targets.push_back({what, reached == coverage.counts.end() ? 0 : reached->second, drawn});
  }
  return targets;
}

// search() with its draws counted for the coverage targets, unless a
// caller counts them already (a generator test).
template <typename Search>
auto counted(const Search& search, std::vector<CoverageTarget>& targets) {
  gen::Coverage coverage;
  std::optional<gen::CoverageScope> scope;
  if (!gen::detail::counting()) scope.emplace(coverage);
  auto result = search();
  scope.reset();
  targets = coverage_targets(coverage);
  return result;
}

PropertyOutcome run_cases(const PropertyDef& prop, const Implementation& impl, DType dtype,
                          const RunConfig& config) {
  const DrawFn& draw = prop.draw;
  const AtSize at_size = prop.at_size;
  PropertyOutcome out = blank_outcome(prop, impl, dtype);
  CaseContext ctx(impl, dtype, config);

  rc::detail::TestParams params;
  params.seed = mix(config.seed ^ fnv1a(test_id(prop, impl, dtype)));
  params.maxSuccess = case_budget(prop, config);
  params.maxSize = 100;
  params.maxDiscardRatio = 4;
  rc::detail::TestMetadata metadata;
  metadata.id = test_id(prop, impl, dtype);
  metadata.description = metadata.id;

  // A reproduce map from RC_PARAMS replays the shrunk case of a failure.
  // RapidCheck announces its configuration when first read, so it is read
  // only when the user set one.
  rc::detail::TestListenerAdapter listener;
  std::unordered_map<std::string, rc::detail::Reproduce> reproduce_map;
  if (rapidcheck_params_given()) reproduce_map = rc::detail::configuration().reproduce;
  const auto testable = [&] {
    std::optional<Case> c;
    try {
      c = draw(ctx);
    } catch (const CaseEnded& e) {  // the draw discarded (or failed) its case
      to_rapidcheck(e.verdict);
    }
    if (c) to_rapidcheck(judge_once(prop, ctx, *c));
  };
  const auto search = [&] {
    return rc::detail::checkProperty(rc::detail::toProperty(testable), metadata, params,
                                     listener, reproduce_map);
  };
  const auto result = counted(search, out.coverage);
  // SIGINT / SIGTERM mid-property: from then on every isolated call throws
  // Cancelled, which RapidCheck takes for a failing case and shrinks to a
  // 1 x 1 problem. That is no verdict (the session reports the property
  // not-run), and no fixture may be written for it: --save-failures was
  // left with a "failure" that replays as a pass.
  const auto interrupted = [&] {
    out.status = PropertyStatus::not_run;
    out.message = "interrupted";
    return out;
  };
  if (cancel_requested()) return interrupted();

  out.cases = ctx.cases;
  out.discarded = ctx.discarded;
  out.max_budget_used = ctx.max_budget_used;
  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  // Asked at most once, only when a feature is on every case: the
  // implementation answers (anything but UNSUPPORTED, without dying) a
  // 1 x 1 problem of the run's formats with no feature at all.
  std::optional<bool> plain;
  const auto answers_plain = [&] {
    if (!plain) {
      Problem p = Problem::zeros(dtype, 1, 1, 1, 1, 1, 1, 1);
      if (config.combo) {
        p.q_dtype = config.combo->q;
        p.kv_dtype = config.combo->kv;
      }
      try {
        plain = impl.forward(p).status != Status::unsupported;
      } catch (...) {
        plain = false;
      }
    }
    return *plain;
  };
  const std::string refused = refused_features(ctx.refusals(), answers_plain);
  if (!refused.empty() && (result.match(success) || result.match(gave_up))) {
    out.status = PropertyStatus::failed;
    out.message = fmt::format(
        "FAILED {} on {}: the implementation refused (answered UNSUPPORTED) {}, which it "
        "declares; {} cases judged, {} discarded ({})",
        prop.name, impl.info().name, refused, ctx.cases, ctx.discarded, discard_summary(ctx));
  } else if (result.match(success)) {
    if (ctx.discarded > ctx.cases) {
      out.status = PropertyStatus::unsupported;
      out.message = fmt::format("{} cases judged, {} discarded ({}): mostly discarded, not passed",
                                ctx.cases, ctx.discarded, discard_summary(ctx));
    } else if (at_size != AtSize::no && config.real_sizes && real_sizes_enabled()) {
      const int small_cases = ctx.cases;
      const int small_discarded = ctx.discarded;
      const double small_budget = ctx.max_budget_used;
      const SizePhase sizes = run_real_sizes(prop, ctx, params.seed);
      if (cancel_requested()) return interrupted();
      // `cases` stays the small cases (--cases sets it); the shapes are in
      // the message.
      out.cases = small_cases;
      out.discarded = small_discarded;
      out.max_budget_used = ctx.max_budget_used;
      out.real_sizes = sizes.counts;
      const RealSizeCounts& n = sizes.counts;
      // One property judges the shapes beyond the declared precision;
      // every other discards them (SPEC 3).
      const bool beyond_judged = prop.judges_beyond_precision;
      if (sizes.failed) {
        report_failure(prop, impl, dtype, config, ctx, {Reproduce::Kind::whole_run, {}},
                       small_cases + n.shapes - 1, out, sizes.found);
      } else {
        // A phase that judged no shape, none of them beyond the declared
        // precision either (which AsAccurateAsBaseline judges), passed
        // nothing at size: `unsupported` (SPEC 5.2: most cases refused or
        // discarded; exit code 0 as for a pass), not `passed` on the
        // strength of the small problems.
        const bool none_at_size = n.shapes > 0 && n.judged == 0 && n.beyond_precision == 0;
        out.status = none_at_size ? PropertyStatus::unsupported : PropertyStatus::passed;
        out.message = fmt::format(
            "{} cases, max budget used {:.3g}; real sizes: {}{}{}", small_cases, small_budget,
            real_size_summary(n, beyond_judged, beyond_precision_judge()),
            n.judged > 0 ? fmt::format(", max budget used {:.3g}", ctx.max_budget_used) : "",
            ctx.discarded ? ", discarded: " + discard_summary(ctx) : "");
      }
    } else {
      out.status = PropertyStatus::passed;
      out.message = fmt::format("{} cases, max budget used {:.3g}{}", ctx.cases,
                                ctx.max_budget_used,
                                ctx.discarded ? ", discarded: " + discard_summary(ctx) : "");
    }
  } else if (result.match(gave_up)) {
    out.status = PropertyStatus::unsupported;
    out.message = fmt::format("gave up after {} cases: {} discarded ({})", ctx.cases,
                              ctx.discarded, discard_summary(ctx));
  } else if (result.match(failure)) {
    if (!ctx.failure_died) run_shrink_passes(prop, ctx);
    rc::detail::Configuration rc_config;
    rc_config.testParams = params;
    rc_config.reproduce[metadata.id] = failure.reproduce;
    report_failure(prop, impl, dtype, config, ctx,
                   {Reproduce::Kind::rc_params, rc::detail::configToMinimalString(rc_config)},
                   failure.numSuccess, out);
  } else {
    result.match(error);
    out.status = PropertyStatus::failed;
    out.message = "RapidCheck error: " + error.description;
  }
  const bool settled = out.status == PropertyStatus::passed ||
                       out.status == PropertyStatus::unsupported;
  if (settled && ctx.explained_failures > 0) {
    settle_explained(prop, impl, dtype, config, ctx, params.seed, search, metadata.id, out);
    if (cancel_requested()) return interrupted();
  }
  return out;
}

}  // namespace

std::optional<Case> draw_at_seed(const PropertyDef& prop, CaseContext& ctx, uint64_t seed) {
  // Inside the testable every outcome of the draw is caught, so RapidCheck
  // sees a success and never runs it again: having given up after a
  // discard it would run the draw once more for its message.
  std::optional<Case> drawn;
  std::exception_ptr stray;
  const auto testable = [&] {
    try {
      drawn = prop.draw(ctx);
    } catch (const CaseEnded&) {              // the draw's ctx.discard()
    } catch (const rc::GenerationFailure&) {  // a generator that gave up
    } catch (...) {
      stray = std::current_exception();
    }
  };
  rc::detail::TestMetadata metadata;
  metadata.id = prop.name + "/real-size";
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = 1;
  params.maxSize = 100;
  params.disableShrinking = true;
  rc::detail::TestListenerAdapter listener;
  rc::detail::checkProperty(rc::detail::toProperty(testable), metadata, params, listener, {});
  if (stray) std::rethrow_exception(stray);
  return drawn;
}

std::optional<PropertyOutcome> outcome_without_calls(const PropertyDef& prop,
                                                     const Implementation& impl, DType dtype,
                                                     const RunConfig& config) {
  if (config.combo && !impl.info().supports(*config.combo)) {
    // A mixed combination (--dtype q=F,kv=F,out=F, SPEC 5.2) runs only where
    // it is declared; the generator then draws every problem in it.
    PropertyOutcome out = blank_outcome(prop, impl, dtype);
    out.combo = config.combo;
    out.status = PropertyStatus::skipped;
    out.message = fmt::format("the combination {} is not declared", combo_name(*config.combo));
    return out;
  }
  if (!impl.info().supports_output(dtype)) {
    PropertyOutcome out = blank_outcome(prop, impl, dtype);
    out.status = PropertyStatus::skipped;
    out.message = fmt::format("dtype {} is not supported", dtype_name(dtype));
    return out;
  }
  if (auto reason = prop.skip_reason ? prop.skip_reason(impl.info(), dtype) : std::nullopt) {
    PropertyOutcome out = blank_outcome(prop, impl, dtype);
    out.status = PropertyStatus::skipped;
    out.message = *reason;
    return out;
  }
  if (auto out = object_outcome(prop, impl, dtype)) {
    out->combo = config.combo;
    return out;
  }
  return std::nullopt;
}

namespace {

// --strict: a pass whose problems never reached one of the property's
// coverage targets (PropertyOutcome::coverage; without --strict the text
// report's note line) fails, since a bug that needs the target went unseen.
// No counterexample: more cases, or the real-size phase, reach it.
void fail_unreached_targets(const PropertyDef& prop, const Implementation& impl,
                            PropertyOutcome& out) {
  if (out.status != PropertyStatus::passed) return;
  std::string missed;
  for (const CoverageTarget& t : out.coverage) {
    if (t.reached != 0 || t.drawn == 0) continue;
    missed += fmt::format("{}none of the {} problems drawn had {}", missed.empty() ? "" : "; ",
                          t.drawn, t.what);
  }
  if (missed.empty()) return;
  out.status = PropertyStatus::failed;
  out.message = fmt::format(
      "FAILED {} on {}: --strict: a coverage target was never reached: {}; a bug that needs it "
      "would go unseen (more --cases, or the real-size phase, reach it)",
      prop.name, impl.info().name, missed);
}

}  // namespace

PropertyOutcome run_property(const PropertyDef& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config) {
  if (auto out = outcome_without_calls(prop, impl, dtype, config)) return *out;
  try {
    PropertyOutcome out;
    if (prop.has_cases()) {
      out = run_cases(prop, impl, dtype, config);
      if (config.strict) fail_unreached_targets(prop, impl, out);
    } else {
      out = blank_outcome(prop, impl, dtype);
      prop.run_whole(impl, dtype, config, out);
    }
    out.combo = config.combo;
    return out;
  } catch (const std::exception& e) {
    PropertyOutcome out = blank_outcome(prop, impl, dtype);
    out.combo = config.combo;
    out.status = PropertyStatus::failed;
    out.message = fmt::format("FAILED {} on {}: {}", prop.name, impl.info().name, e.what());
    return out;
  }
}

}  // namespace attncheck
