// Replay (attncheck/run.h): a fixture's case judged again by the property
// it names, and the run configuration the fixture recorded.

#include <algorithm>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "attncheck/oracle.h"
#include "host/isolation.h"
#include "attncheck/run.h"
#include "properties/args.h"
#include "properties/case_context.h"
#include "run/failure_report.h"
#include "run/judge_once.h"

namespace attncheck {
namespace {

// The fixture's one case, judged as the run judged it.
PropertyOutcome judge_again(const PropertyDef& prop, const Implementation& impl,
                            const FixtureMeta& meta, const Case& c, const RunConfig& config) {
  const DType dtype = c.problem.dtype;
  PropertyOutcome out = blank_outcome(prop, impl, dtype);
  CaseContext ctx(impl, dtype, config);
  ctx.replay_path = meta.path.value_or("");
  const Verdict v = judge_once(prop, ctx, c);  // ctx reads c while the report is made
  if (v.was_set_aside() && ctx.explained_failures > 0) {
    // With known findings (the failure database's replay): a failure one
    // of them explains is set aside by judge_once, and is xfail by cause.
    const KnownFinding& k = config.known_findings.at(ctx.explained_finding);
    out.status = PropertyStatus::xfail;
    out.cases = 1;
    out.expected = k;
    out.message = fmt::format("the fixture's case fails as known finding {} ({}) explains",
                              k.finding, k.cause);
  } else if (v.passed()) {
    out.status = PropertyStatus::passed;
    out.cases = 1;
    out.max_budget_used = ctx.max_budget_used;
    out.message = fmt::format("the fixture's case passes, budget used {:.3g}", ctx.max_budget_used);
  } else if (v.discarded()) {
    out.status = PropertyStatus::unsupported;
    out.discarded = 1;
    out.message = "the fixture's case was discarded: " +
                  (v.message.empty() ? std::string("(no reason given)") : v.message);
  } else {
    RunConfig no_save = config;
    no_save.save_failures_dir.clear();
    report_failure(prop, impl, dtype, no_save, ctx, {}, -1, out);
  }
  return out;
}

// Every check of replay_fixture before the case is judged; the property.
const PropertyDef& checked_replay(const Fixture& fixture, const Implementation& impl) {
  const std::string name = fixture.meta.property.value_or("");
  const PropertyDef* prop = find_property_def(name);
  if (!prop) throw InputError(fmt::format("meta.property: unknown property '{}'", name));
  if (!prop->has_cases()) throw InputError(fmt::format("{} has no single case to replay", name));
  if (prop->validate_args) {
    prop->validate_args(fixture);
  } else {
    refuse_args(fixture, prop->name);
  }
  // A fixture's label is a claim: its problem must be one the property
  // could have drawn, or a correct implementation could "fail" its replay.
  if (prop->not_a_case) {
    if (const auto why = prop->not_a_case(fixture.problem)) {
      throw InputError(fmt::format("problem: not a case of {}: {}", prop->name, *why));
    }
  }
  // The oracle's input rule (a NaN or an infinity a row can see has no
  // exact result): a case `oracle` refuses is refused here too, never
  // judged, or a correct implementation would "fail" on its NaN output.
  try {
    check_oracle_inputs(fixture.problem);
  } catch (const NonFiniteInput& e) {
    throw InputError(fmt::format("problem: field '{}': {}", e.field, e.what()));
  }
  if (!impl.info().supports(combo_of(fixture.problem))) {
    throw InputError(fmt::format("{} does not support dtype {}", impl.info().name,
                                 combo_name(combo_of(fixture.problem))));
  }
  // Nor a serving part it does not declare (SPEC 5.1).
  if (const std::string part = undeclared_serving_part(impl.info(), fixture.problem); !part.empty()) {
    throw InputError(fmt::format("{} does not declare {}, which the fixture's problem needs",
                                 impl.info().name, part));
  }
  // The path the failing call took must be one the implementation has.
  if (const std::string path = fixture.meta.path.value_or(""); !path.empty()) {
    const auto& paths = impl.info().paths;
    if (std::none_of(paths.begin(), paths.end(),
                     [&](const ImplPath& x) { return x.name == path; })) {
      throw InputError(
          fmt::format("meta.path: {} declares no path '{}'", impl.info().name, path));
    }
  }
  return *prop;
}

// The case `c` of `meta`'s property judged on `impl`.
PropertyOutcome replay_case(const PropertyDef& prop, const Implementation& impl,
                            const FixtureMeta& meta, const Case& c, const RunConfig& config) {
  try {
    if (auto out = object_outcome(prop, impl, c.problem.dtype)) return *out;
    return judge_again(prop, impl, meta, c, config);
  } catch (const nlohmann::json::exception& e) {
    // The fixture's args lack what the property reads: the file's fault.
    throw InputError(fmt::format("field 'args': {}", e.what()));
  } catch (const std::exception& e) {
    PropertyOutcome out = blank_outcome(prop, impl, c.problem.dtype);
    out.status = PropertyStatus::failed;
    out.message = fmt::format("FAILED {} on {}: {}", prop.name, impl.info().name, e.what());
    return out;
  }
}

}  // namespace

PropertyOutcome replay_fixture(const Fixture& fixture, const Implementation& impl,
                               const RunConfig& config) {
  const PropertyDef& prop = checked_replay(fixture, impl);
  return replay_case(prop, impl, fixture.meta, Case{fixture.problem, fixture.args}, config);
}

PropertyOutcome replay_fixture(Fixture&& fixture, const Implementation& impl,
                               const RunConfig& config) {
  const PropertyDef& prop = checked_replay(fixture, impl);
  const Case c{std::move(fixture.problem), std::move(fixture.args)};
  return replay_case(prop, impl, fixture.meta, c, config);
}

RunConfig replay_config(const Fixture& f, const ReplayOverrides& overrides) {
  const FixtureMeta& meta = f.meta;
  RunConfig config;
  config.seed = meta.seed.value_or(kDefaultSeed);
  config.strict = overrides.strict.value_or(meta.strict.value_or(false));
  try {
    config.profile = parse_profile(overrides.profile.value_or(meta.profile.value_or("ci")));
  } catch (const InputError& e) {
    throw InputError(fmt::format("--profile: {}", e.what()));
  }
  config.cases = overrides.cases > 0 ? overrides.cases : meta.cases.value_or(0);
  if (overrides.timeout_ms) {
    config.timeout_ms = *overrides.timeout_ms;
  } else if (meta.timeout_ms) {
    config.timeout_ms = *meta.timeout_ms;
  }
  if (overrides.baseline_factor) {
    config.property_options.baseline_factor = *overrides.baseline_factor;
  } else if (meta.baseline_factor) {
    if (!(*meta.baseline_factor >= 1))
      throw InputError("meta.baseline_factor: expected a number of at least 1");
    config.property_options.baseline_factor = *meta.baseline_factor;
  }
  return config;
}

}  // namespace attncheck
