#include <cstdlib>
#include <exception>
#include <sstream>

#include <fmt/format.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include "attncheck/fixture.h"
#include "properties/harness.h"

namespace attncheck {

std::string_view status_name(PropertyStatus s) {
  switch (s) {
    case PropertyStatus::passed: return "passed";
    case PropertyStatus::failed: return "failed";
    case PropertyStatus::xfail: return "xfail";
    case PropertyStatus::xpass: return "xpass";
    case PropertyStatus::skipped: return "skipped";
    case PropertyStatus::unsupported: return "unsupported";
    case PropertyStatus::not_run: return "not-run";
  }
  return "unknown";
}

const std::vector<PropertyDef>& property_catalog() {
  static const std::vector<PropertyDef> catalog = {
      matches_oracle_property(), row_sums_property(),
      masked_weights_property(), constant_values_property(),
      permutation_property(),    variance_property(),
      empty_rows_property(),
  };
  return catalog;
}

const PropertyDef* find_property(std::string_view name) {
  for (const PropertyDef& p : property_catalog())
    if (p.name == name) return &p;
  return nullptr;
}

std::optional<std::string> needs_weights(const ImplInfo& info) {
  if (info.has(ATTNCHECK_FEATURE_WEIGHTS)) return std::nullopt;
  return "the implementation does not return weights (FEATURE_WEIGHTS)";
}

int case_budget(const PropertyDef& prop, const RunConfig& config) {
  if (config.cases > 0) return config.cases;
  return config.profile == "thorough" ? 10 * prop.default_cases : prop.default_cases;
}

ForwardResult CaseContext::call(const Problem& p) {
  ForwardResult r;
  try {
    r = impl_.forward(p);
  } catch (const std::exception& e) {
    fail(p, fmt::format("the implementation threw: {}", e.what()));
  } catch (...) {
    fail(p, "the implementation threw a non-standard exception");
  }
  if (r.status == Status::unsupported) discard("unsupported by the implementation");
  if (r.status == Status::ok) {
    const size_t n_out = static_cast<size_t>(p.batch * p.heads * p.tq * p.dv);
    if (r.out.size() != n_out) {
      fail(p, fmt::format("out has {} elements, expected {}", r.out.size(), n_out));
    }
    if (info().has(ATTNCHECK_FEATURE_WEIGHTS) &&
        r.weights.size() != static_cast<size_t>(p.score_elements())) {
      fail(p, fmt::format("weights has {} elements, expected {}",
                          r.weights.size(), p.score_elements()));
    }
    if (info().has(ATTNCHECK_FEATURE_LSE) &&
        r.lse.size() != static_cast<size_t>(p.batch * p.heads * p.tq)) {
      fail(p, fmt::format("lse has {} elements, expected {}", r.lse.size(),
                          p.batch * p.heads * p.tq));
    }
  }
  return r;
}

ForwardResult CaseContext::call_ok(const Problem& p) {
  ForwardResult r = call(p);
  if (r.status == Status::error) {
    fail(p, "reported an error on a problem without empty rows: " + r.error);
  }
  return r;
}

std::pair<OracleResult, Tolerances> CaseContext::reference(const Problem& p) {
  OracleResult o = oracle(p);
  Tolerances t = tolerances(p, o, info().precision);
  if (t.ill_conditioned_rows > 0) discard("ill-conditioned (beyond first-order analysis)");
  return {std::move(o), std::move(t)};
}

void CaseContext::expect(const Problem& p, const Comparison& c,
                         const std::string& what, nlohmann::json args) {
  if (c.ok()) {
    passed(c.max_budget_used);
    return;
  }
  fail(p,
       fmt::format("{}: {} of {} elements out of tolerance; worst: {}\n{}", what,
                   c.failed, c.checked, c.worst.describe(), c.describe_failures()),
       std::move(args));
}

void CaseContext::fail(const Problem& p, const std::string& message,
                       nlohmann::json args) {
  // Shrinking accepts every failing candidate it finds, so the last failure
  // recorded is the shrunk counterexample.
  failed_problem = p;
  failure_message = message;
  failure_args = std::move(args);
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

namespace {

// SplitMix64: decorrelates the per-property seeds derived from one run seed.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string test_id(const PropertyDef& prop, const Implementation& impl, DType dtype) {
  return fmt::format("{}/{}/{}", prop.name, impl.info().name, dtype_name(dtype));
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

std::string discard_summary(const CaseContext& ctx) {
  std::string s;
  for (const auto& [reason, n] : ctx.discard_reasons) {
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, reason);
  }
  return s;
}

}  // namespace

PropertyOutcome run_cases(const PropertyDef& prop, const Implementation& impl,
                          DType dtype, const RunConfig& config,
                          const std::function<void(CaseContext&)>& body) {
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
  const auto result = rc::detail::checkProperty(
      rc::detail::toProperty([&] { body(ctx); }), metadata, params, listener, reproduce_map);

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
    out.status = PropertyStatus::failed;
    rc::detail::Configuration rc_config;
    rc_config.testParams = params;
    rc_config.reproduce[metadata.id] = failure.reproduce;
    const std::string reproduce = rc::detail::configToMinimalString(rc_config);
    std::ostringstream report;
    report << fmt::format("FAILED {} on {} ({})\n", prop.name, impl.info().name,
                          dtype_name(dtype));
    report << "  " << ctx.failure_message;
    if (!ctx.failure_message.ends_with('\n')) report << "\n";
    if (ctx.failed_problem) {
      const Problem& p = *ctx.failed_problem;
      out.counterexample = CounterexampleShape{p.batch, p.heads, p.kv_heads, p.tq,
                                               p.tk, p.dk, p.dv, p.dtype};
      report << "  shrunk problem:\n" << describe_problem(p);
      if (!config.save_failures_dir.empty()) {
        Fixture f;
        f.problem = p;
        f.args = ctx.failure_args;
        f.meta = {{"property", prop.name},       {"impl", impl.info().name},
                  {"dtype", dtype_name(dtype)},  {"seed", config.seed},
                  {"reproduce", reproduce},      {"attncheck", ATTNCHECK_VERSION}};
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
    report << fmt::format("  after {} passing cases; seed {}\n", failure.numSuccess, config.seed);
    report << fmt::format("  reproduce: RC_PARAMS=\"{}\" attncheck check --impl {} --property {} "
                          "--dtype {} --seed {}\n",
                          reproduce, impl.info().name, prop.name, dtype_name(dtype), config.seed);
    if (out.fixture) report << "  fixture: " << *out.fixture << "\n";
    out.message = report.str();
  } else {
    result.match(error);
    out.status = PropertyStatus::failed;
    out.message = "RapidCheck error: " + error.description;
  }
  return out;
}

PropertyOutcome run_once(const PropertyDef& prop, const Implementation& impl,
                         DType dtype,
                         const std::function<void(PropertyOutcome&)>& body) {
  PropertyOutcome out = blank_outcome(prop, impl, dtype);
  body(out);
  return out;
}

PropertyOutcome run_property(const PropertyDef& prop, const Implementation& impl,
                             DType dtype, const RunConfig& config) {
  if (!impl.info().supports(dtype)) {
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
    return prop.run(impl, dtype, config);
  } catch (const std::exception& e) {
    PropertyOutcome out = blank_outcome(prop, impl, dtype);
    out.status = PropertyStatus::failed;
    out.message = fmt::format("FAILED {} on {}: {}", prop.name, impl.info().name, e.what());
    return out;
  }
}

}  // namespace attncheck
