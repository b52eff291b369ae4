#include <cstdlib>
#include <exception>
#include <sstream>

#include <fmt/format.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include "attncheck/diagnosis.h"
#include "attncheck/error.h"
#include "attncheck/fixture.h"
#include "attncheck/version.h"
#include "properties/harness.h"
#include "properties/seeds.h"

namespace attncheck {

const std::vector<PropertyDef>& property_catalog() {
  // SPEC section 2's order.
  static const std::vector<PropertyDef> catalog = {
      matches_oracle_property(),   row_sums_property(),        masked_weights_property(),
      constant_values_property(),  convex_hull_property(),     permutation_property(),
      key_translation_property(),  value_linearity_property(), variance_property(),
      empty_rows_property(),       extreme_scores_property(),  causal_prefix_property(),
      window_property(),           batch_head_property(),      gqa_property(),
      multihead_property(),        layout_property(),           determinism_property(),     gradients_property(),
      agreement_property(),
      // Version 2 (SPEC 2), each only for implementations declaring its feature.
      sink_property(),             packed_property(),          paged_property(),
      descale_property(),
  };
  return catalog;
}

const PropertyDef* find_property(std::string_view name) {
  for (const PropertyDef& p : property_catalog())
    if (p.name == name) return &p;
  return nullptr;
}

bool real_sizes_enabled() {
  const char* v = std::getenv("ATTNCHECK_REAL_SIZES");
  return !(v && std::string_view(v) == "0");
}

std::string_view profile_name(Profile p) { return p == Profile::thorough ? "thorough" : "ci"; }

Profile parse_profile(std::string_view name) {
  for (Profile p : {Profile::ci, Profile::thorough})
    if (profile_name(p) == name) return p;
  throw InputError(fmt::format("unknown profile '{}' (expected ci or thorough)", name));
}

std::optional<std::string> needs_weights(const ImplInfo& info) {
  if (info.has(ATTNCHECK_FEATURE_WEIGHTS) || !info.limits.dv_equals_dk) return std::nullopt;
  return "the implementation returns no weights and its limits (dv = dk) keep V = I from "
         "showing them";
}

int case_budget(const PropertyDef& prop, const RunConfig& config) {
  if (config.cases > 0) return config.cases;
  return config.profile == Profile::thorough ? 10 * prop.default_cases : prop.default_cases;
}

std::optional<std::string> always_applies(const ImplInfo&, DType) { return std::nullopt; }

SkipFn needs_features(Features features, std::string what) {
  return [features, what](const ImplInfo& info, DType) -> std::optional<std::string> {
    if (info.has(features)) return std::nullopt;
    return "the implementation does not declare " + what;
  };
}

void CaseContext::require_declared(const Problem& p) {
  const std::string part = undeclared_v2_part(info(), p);
  if (part.empty()) return;
  fail(fmt::format("attncheck drew a problem with {}, which {} does not declare: a defect of "
                   "attncheck, not of the implementation (please report it)",
                   part, info().name));
}

ForwardResult CaseContext::call(const Problem& p) {
  last_call_ = p;
  require_declared(p);
  ForwardResult r;
  try {
    r = impl_.forward(p);
  } catch (const ImplementationDied& e) {
    fail(e.what(), true);
  } catch (const std::exception& e) {
    fail(fmt::format("the implementation threw: {}", e.what()));
  } catch (...) {
    fail("the implementation threw a non-standard exception");
  }
  if (r.status == Status::unsupported) discard("unsupported by the implementation");
  if (r.status == Status::ok) {
    for (ArrayKind kind : returned_kinds(info(), kForwardKinds)) {
      const size_t got = array_of(r, kind).size();
      if (got != static_cast<size_t>(array_size(kind, p))) {
        fail(fmt::format("{} has {} elements, expected {}", array_name(kind), got,
                         array_size(kind, p)));
      }
    }
  }
  return r;
}

ForwardResult CaseContext::call_ok(const Problem& p) {
  ForwardResult r = call(p);
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

}  // namespace

std::pair<OracleResult, Tolerances> CaseContext::reference(const Problem& p) {
  // The enclosure's width is a few dk units of double roundoff: too wide
  // for implementations that accumulate in f64 themselves.
  if (p.score_elements() * (p.dk + p.dv) >= kEnclosureFrom && info().precision.accum != DType::f64 &&
      !enclosure_unsupported(p)) {
    OracleResult e = enclose(p);
    Tolerances t = tolerances(p, e, info().precision);
    if (t.ill_conditioned_rows > 0) discard("ill-conditioned (beyond first-order analysis)");
    if (narrow_enough(e, t)) {
      last_tier_ = OracleResult::Tier::enclosure;
      return {std::move(e), std::move(t)};
    }
  }
  last_tier_ = OracleResult::Tier::certified;
  OracleResult o = oracle(p);
  if (!o.uncertified.empty()) discard("oracle could not certify a value");
  Tolerances t = tolerances(p, o, info().precision);
  if (t.ill_conditioned_rows > 0) discard("ill-conditioned (beyond first-order analysis)");
  return {std::move(o), std::move(t)};
}

void CaseContext::screen(const Problem& p) {
  if (size_ && beyond_first_order_by_length(p, info().precision)) {
    discard("ill-conditioned (beyond first-order analysis)");
  }
}

void CaseContext::expect(const Comparison& c, const std::string& what) {
  if (c.ok()) {
    passed(c.max_budget_used);
    return;
  }
  fail(fmt::format("{}: {} of {} elements out of tolerance; worst: {}\n{}{}", what, c.failed,
                   c.checked, c.worst.describe(), c.describe_failures(),
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

void CaseContext::fail(const std::string& message, bool died) {
  // Shrinking accepts every failing candidate it finds, so the last failure
  // recorded is the shrunk counterexample.
  if (current_) failed_case = *current_;
  failed_call = last_call_;
  if (failures++ == 0) {
    first_failed_case = failed_case;
    first_failed_call = failed_call;
  }
  failure_message = message;
  failure_died = died;
  RC_FAIL(message);
}

void CaseContext::discard(const std::string& reason) {
  ++discarded;
  ++discard_reasons[reason];
  RC_DISCARD(reason);
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
  if (ctx.info().has(ATTNCHECK_FEATURE_NONDETERMINISTIC) && !c.ok()) {
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

namespace {

std::string test_id(const PropertyDef& prop, const Implementation& impl, DType dtype) {
  return fmt::format("{}/{}/{}", prop.name, impl.info().name, dtype_name(dtype));
}

std::string discard_summary(const CaseContext& ctx) {
  std::string s;
  for (const auto& [reason, n] : ctx.discard_reasons) {
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, reason);
  }
  return s;
}

}  // namespace

PropertyOutcome blank_outcome(const PropertyDef& prop, const Implementation& impl,
                              DType dtype) {
  PropertyOutcome out;
  out.property = prop.name;
  out.impl = impl.info().name;
  out.kind = impl.info().kind;
  out.dtype = dtype;
  return out;
}

namespace {

// The options of `check` beyond the case's identity that change the cases
// or their judgement, as its command line spells them (" --strict ...").
std::string judgement_options(const RunConfig& config) {
  std::string options;
  if (config.strict) options += " --strict";
  if (config.profile != Profile::ci) options += fmt::format(" --profile {}", profile_name(config.profile));
  if (config.cases > 0) options += fmt::format(" --cases {}", config.cases);
  if (config.timeout_ms > 0) options += fmt::format(" --timeout-ms {}", config.timeout_ms);
  if (!config.real_sizes) options += " --no-real-sizes";
  return options;
}

// How a failure's report says to reproduce it.
struct Reproduce {
  enum class Kind {
    none,       // replay of a fixture: nothing to print
    rc_params,  // a small case: RC_PARAMS with RapidCheck's reproduce map
    whole_run,  // the real-size phase: the seed replays the whole run
  } kind = Kind::none;
  std::string rc_params;  // for Kind::rc_params
};

// The failure report of SPEC 2 and the fixture, for a failed case.
void report_failure(const PropertyDef& prop, const Implementation& impl, DType dtype,
                    const RunConfig& config, const CaseContext& ctx,
                    const Reproduce& reproduce, int passing, PropertyOutcome& out,
                    const std::string& found = {}) {
  out.status = PropertyStatus::failed;
  std::ostringstream report;
  report << fmt::format("FAILED {} on {} ({})\n", prop.name, impl.info().name,
                        dtype_name(dtype));
  report << found;
  report << "  " << ctx.failure_message;
  if (!ctx.failure_message.ends_with('\n')) report << "\n";
  if (ctx.failed_case) {
    const Problem& p = ctx.failed_case->problem;
    out.counterexample =
        CounterexampleShape{p.batch, p.heads, p.kv_heads, p.tq, p.tk, p.dk, p.dv, p.dtype};
    report << "  shrunk problem:\n" << describe_problem(p);
    if (!ctx.failed_case->args.empty()) {
      report << "    args " << ctx.failed_case->args.dump() << "\n";
    }
    // A crash or a hang has no output to explain (and calling again would
    // wait out the time limit once more).
    // The case's own problem may compute fine while a problem the property
    // derived from it (huge values at masked keys, a permutation) did not;
    // a name must also explain the failure before shrinking.
    if (!ctx.failure_died) {
      FailureRecord record{p, ctx.failed_call, std::nullopt, std::nullopt};
      if (ctx.failures > 1 && ctx.first_failed_case) {
        record.unshrunk = ctx.first_failed_case->problem;
        record.unshrunk_call = ctx.first_failed_call;
      }
      out.diagnosis = diagnose_failure(impl, record);
    }
    report << (ctx.failure_died ? "  diagnosis: none (the call did not return, so there is no "
                                  "output to explain)\n"
                                : describe_diagnosis(out.diagnosis));
    if (!config.save_failures_dir.empty()) {
      Fixture f;
      f.problem = p;
      f.args = ctx.failed_case->args;
      f.meta = {{"property", prop.name},      {"impl", impl.info().name},
                {"dtype", combo_name(combo_of(p))}, {"seed", config.seed},
                {"reproduce", reproduce.rc_params}, {"attncheck", version()},
                {"strict", config.strict},    {"profile", profile_name(config.profile)}};
      // What changes the cases or their judgement, so replay judges alike.
      if (config.cases > 0) f.meta["cases"] = config.cases;
      if (config.timeout_ms > 0) f.meta["timeout_ms"] = config.timeout_ms;
      const std::string path = fmt::format("{}/{}-{}-{}.json", config.save_failures_dir,
                                           impl.info().name, dtype_name(dtype), prop.name);
      try {
        save_fixture(path, f);
        out.fixture = path;
      } catch (const std::exception& e) {
        report << "  (fixture not saved: " << e.what() << ")\n";
      }
    }
  }
  report << "  ";
  if (passing >= 0) report << fmt::format("after {} passing cases; ", passing);
  report << fmt::format("seed {}\n", config.seed);
  // A plugin's implementations are found only with the plugin loaded; a
  // Python file's (an origin ending in .py, as the command reads --plugin
  // too) with --python FILE.py:NAME, which loads that one alone.
  const ImplInfo& info = impl.info();
  const std::string plugin =
      info.origin.empty()          ? ""
      : info.origin.ends_with(".py") ? fmt::format(" --python {}:{}", info.origin, info.name)
                                     : fmt::format(" --plugin {}", info.origin);
  // A mixed combination is spelled as --dtype took it (SPEC 5.2).
  const std::string dtype_arg = config.combo ? combo_name(*config.combo) : std::string(dtype_name(dtype));
  if (reproduce.kind == Reproduce::Kind::whole_run) {
    // A real-size failure: the seed replays the whole run, size phase and
    // search included (RapidCheck's reproduce map covers small cases only).
    report << fmt::format("  reproduce: attncheck check{} --impl {} --property {} --dtype {} "
                          "--seed {}{}\n",
                          plugin, impl.info().name, prop.name, dtype_arg, config.seed,
                          judgement_options(config));
  } else if (reproduce.kind == Reproduce::Kind::rc_params) {
    report << fmt::format(
        "  reproduce: RC_PARAMS=\"{}\" attncheck check{} --impl {} --property {} --dtype {} "
        "--seed {}{}\n",
        reproduce.rc_params, plugin, impl.info().name, prop.name, dtype_arg, config.seed,
        judgement_options(config));
  }
  if (out.fixture) {
    report << "  fixture: " << *out.fixture << "  (rerun: attncheck replay " << *out.fixture
           << plugin << ")\n";
  }
  out.message = report.str();
}

// A fixture's label is a claim: its problem must be one the property could
// have drawn (SPEC 3: rows have an allowed key, except EmptyRowsAreRejected's
// which have an empty one; a causal or windowed property's problem is
// causal or windowed), or a correct implementation could "fail" its replay.
void check_replay_preconditions(const PropertyDef& prop, const Problem& p) {
  const auto refuse = [&](const std::string& why) {
    throw InputError(fmt::format("problem: not a case of {}: {}", prop.name, why));
  };
  if (prop.name == "EmptyRowsAreRejected") {
    if (!p.has_empty_rows()) refuse("no row is empty (every query has an allowed key)");
    return;
  }
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seq_tq(b); ++i)
        if (p.allowed_count(b, h, i) == 0 && p.sink.empty()) {
          refuse(fmt::format("row [{}, {}, {}] has no allowed key (only EmptyRowsAreRejected "
                             "makes empty rows)",
                             b, h, i));
        }
  if (prop.name == "CausalPrefixIndependence" && !p.causal) refuse("the problem is not causal");
  if (prop.name == "WindowLocality" && p.window_left < 0 && p.window_right < 0) {
    refuse("the problem has no window");
  }
  if (prop.name == "GroupedQueryEquivalence" && p.kv_heads == p.heads) {
    refuse("kv_heads equals heads (no grouped K/V)");
  }
}

// After RapidCheck's shrinking: batch entries, K/V head groups and query
// heads the failure does not need are dropped (issue 17: a counterexample
// keeps batch, heads and kv_heads above 1 only when the failure needs
// them). RapidCheck shrinks each draw in place, so a slice whose values
// are not the simplest stays. Each candidate keeps one slice of the
// current counterexample; the first that still fails replaces it (the
// judge records it), until none does. Only for dense problems, and cases
// whose args name no row, batch entry or head.
bool args_name_slices(const nlohmann::json& args) {
  for (const char* key : {"row", "index", "changed", "changed_sequence", "kv_head", "heads"})
    if (args.contains(key)) return true;
  return false;
}

void drop_unneeded_slices(const PropertyDef& prop, CaseContext& ctx, const JudgeFn& judge) {
  const auto fails = [&](const Problem& p) {
    // A slice must still be a case of the property (an empty row for
    // EmptyRowsAreRejected, grouped K/V heads for GroupedQueryEquivalence),
    // or its fixture would not replay.
    try {
      check_replay_preconditions(prop, p);
    } catch (const InputError&) {
      return false;
    }
    const Case c{p, ctx.failed_case->args};
    ctx.begin(c);
    try {
      judge(ctx, c);
    } catch (const rc::detail::CaseResult& r) {
      return r.type == rc::detail::CaseResult::Type::Failure;
    } catch (const std::exception&) {
    }
    return false;
  };
  // A slice keeps the args and stays dense: eligibility is decided once.
  if (!ctx.failed_case || args_name_slices(ctx.failed_case->args) ||
      ctx.failed_case->problem.varlen())
    return;
  // A sliced problem is not RapidCheck's: the discards and cases its
  // judging counts are not the run's.
  const int cases = ctx.cases, discarded = ctx.discarded;
  const auto reasons = ctx.discard_reasons;
  const double budget = ctx.max_budget_used;
  bool progress = true;
  while (progress) {
    progress = false;
    const Problem p = ctx.failed_case->problem;
    std::vector<SliceChoice> choices;
    if (p.batch > 1)
      for (int64_t b = 0; b < p.batch; ++b) choices.push_back({b, std::nullopt, std::nullopt});
    if (p.kv_heads > 1)
      for (int64_t g = 0; g < p.kv_heads; ++g) choices.push_back({std::nullopt, g, std::nullopt});
    else if (p.heads > 1)
      for (int64_t h = 0; h < p.heads; ++h) choices.push_back({std::nullopt, std::nullopt, h});
    for (const SliceChoice& choice : choices) {
      if (fails(slice_problem(p, choice))) {
        progress = true;
        break;
      }
    }
  }
  ctx.cases = cases;
  ctx.discarded = discarded;
  ctx.discard_reasons = reasons;
  ctx.max_budget_used = budget;
}

PropertyOutcome run_cases(const PropertyDef& prop, const Implementation& impl, DType dtype,
                          const RunConfig& config, const DrawFn& draw, const JudgeFn& judge,
                          AtSize at_size) {
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
  if (std::getenv("RC_PARAMS")) reproduce_map = rc::detail::configuration().reproduce;
  const auto testable = [&] {
    const Case c = draw(ctx);
    ctx.begin(c);
    judge(ctx, c);
  };
  const auto result = rc::detail::checkProperty(rc::detail::toProperty(testable), metadata,
                                                params, listener, reproduce_map);

  out.cases = ctx.cases;
  out.discarded = ctx.discarded;
  out.max_budget_used = ctx.max_budget_used;
  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  if (result.match(success)) {
    if (ctx.discarded > ctx.cases) {
      out.status = PropertyStatus::unsupported;
      out.message = fmt::format("{} cases judged, {} discarded ({}): mostly discarded, not passed",
                                ctx.cases, ctx.discarded, discard_summary(ctx));
    } else if (at_size != AtSize::no && config.real_sizes && real_sizes_enabled()) {
      const int small_cases = ctx.cases;
      const int small_discarded = ctx.discarded;
      const double small_budget = ctx.max_budget_used;
      const SizePhase sizes = run_real_sizes(prop.name, at_size, ctx, draw, judge, params.seed);
      // `cases` stays the small cases (--cases sets it); the shapes are in
      // the message.
      out.cases = small_cases;
      out.discarded = small_discarded;
      out.max_budget_used = ctx.max_budget_used;
      if (sizes.failed) {
        report_failure(prop, impl, dtype, config, ctx, {Reproduce::Kind::whole_run, {}},
                       small_cases + sizes.cases, out, sizes.found);
      } else {
        out.status = PropertyStatus::passed;
        out.message = fmt::format(
            "{} cases, max budget used {:.3g}; real sizes: {} shapes{}, max budget used {:.3g}{}",
            small_cases, small_budget, sizes.cases,
            sizes.discarded ? fmt::format(" ({} discarded)", sizes.discarded) : "",
            ctx.max_budget_used,
            small_discarded ? ", discarded: " + discard_summary(ctx) : "");
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
    if (!ctx.failure_died) drop_unneeded_slices(prop, ctx, judge);
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
  return out;
}

}  // namespace

PropertyDef case_property(std::string name, std::string statement, int default_cases,
                          SkipFn skip, DrawFn draw, JudgeFn judge, ValidateArgsFn validate_args,
                          AtSize at_size) {
  PropertyDef d{std::move(name), std::move(statement), default_cases, std::move(skip), {}, {},
                std::move(validate_args), at_size};
  const PropertyDef header{d.name, d.statement, d.default_cases, {}, {}, {}, {}, at_size};
  d.run = [header, draw, judge](const Implementation& impl, DType dtype,
                                const RunConfig& config) {
    return run_cases(header, impl, dtype, config, draw, judge, header.at_size);
  };
  d.replay = [header, judge](const Implementation& impl, const Fixture& f,
                             const RunConfig& config) {
    const DType dtype = f.problem.dtype;
    PropertyOutcome out = blank_outcome(header, impl, dtype);
    CaseContext ctx(impl, dtype, config);
    const Case c{f.problem, f.args};
    ctx.begin(c);
    try {
      judge(ctx, c);
      out.status = PropertyStatus::passed;
      out.cases = 1;
      out.max_budget_used = ctx.max_budget_used;
      out.message =
          fmt::format("the fixture's case passes, budget used {:.3g}", ctx.max_budget_used);
    } catch (const rc::detail::CaseResult& r) {
      if (r.type == rc::detail::CaseResult::Type::Discard) {
        out.status = PropertyStatus::unsupported;
        out.discarded = 1;
        // The reason the judge gave, not RapidCheck's description of the
        // discard (its source location, over several lines).
        out.message = "the fixture's case was discarded: " +
                      (ctx.discard_reasons.empty() ? std::string("(no reason given)")
                                                   : ctx.discard_reasons.begin()->first);
      } else {
        RunConfig no_save = config;
        no_save.save_failures_dir.clear();
        report_failure(header, impl, dtype, no_save, ctx, {}, -1, out);
      }
    }
    return out;
  };
  return d;
}

PropertyOutcome replay_fixture(const Fixture& fixture, const Implementation& impl,
                               const RunConfig& config) {
  const auto name = fixture.meta.value("property", std::string());
  const PropertyDef* prop = find_property(name);
  if (!prop) throw InputError(fmt::format("meta.property: unknown property '{}'", name));
  if (!prop->replay) throw InputError(fmt::format("{} has no single case to replay", name));
  if (prop->validate_args) prop->validate_args(fixture);
  check_replay_preconditions(*prop, fixture.problem);
  if (!impl.info().supports(combo_of(fixture.problem))) {
    throw InputError(fmt::format("{} does not support dtype {}", impl.info().name,
                                 combo_name(combo_of(fixture.problem))));
  }
  // Nor a version 2 part it does not declare (SPEC 5.1).
  if (const std::string part = undeclared_v2_part(impl.info(), fixture.problem); !part.empty()) {
    throw InputError(fmt::format("{} does not declare {}, which the fixture's problem needs",
                                 impl.info().name, part));
  }
  try {
    return prop->replay(impl, fixture, config);
  } catch (const nlohmann::json::exception& e) {
    // The fixture's args lack what the property reads: the file's fault.
    throw InputError(fmt::format("field 'args': {}", e.what()));
  } catch (const std::exception& e) {
    PropertyOutcome out = blank_outcome(*prop, impl, fixture.problem.dtype);
    out.status = PropertyStatus::failed;
    out.message = fmt::format("FAILED {} on {}: {}", prop->name, impl.info().name, e.what());
    return out;
  }
}

PropertyOutcome run_property(const PropertyDef& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config) {
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
  if (auto reason = prop.skip_reason(impl.info(), dtype)) {
    PropertyOutcome out = blank_outcome(prop, impl, dtype);
    out.status = PropertyStatus::skipped;
    out.message = *reason;
    return out;
  }
  try {
    PropertyOutcome out = prop.run(impl, dtype, config);
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
