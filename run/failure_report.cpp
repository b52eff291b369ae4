// The failure report of SPEC 2 and its fixture (run/failure_report.h).

#include "run/failure_report.h"
#include "run/saved_failures.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "judge/causes.h"
#include "judge/diagnosis.h"
#include "attncheck/fixture.h"
#include "attncheck/registry.h"
#include "core/text.h"

namespace attncheck {
namespace {

// The options of `check` beyond the case's identity that change the cases
// or their judgement, as its command line spells them (" --strict ...").
std::string judgement_options(const RunConfig& config) {
  std::string options;
  if (config.strict) options += " --strict";
  if (config.profile != Profile::ci) options += fmt::format(" --profile {}", profile_name(config.profile));
  if (config.cases > 0) options += fmt::format(" --cases {}", config.cases);
  if (config.timeout_ms > 0) options += fmt::format(" --timeout-ms {}", config.timeout_ms);
  if (const double f = config.property_options.baseline_factor; f != kDefaultBaselineFactor) {
    options += fmt::format(" --baseline-factor {}", f);
  }
  if (!config.real_sizes) options += " --no-real-sizes";
  return options;
}

}  // namespace

std::string fixture_path(const std::string& dir, const std::string& impl, DType dtype,
                         const std::string& property) {
  return fmt::format("{}/{}-{}-{}.json", dir, impl, dtype_name(dtype), property);
}

namespace {

// Where the fixture came from, and what changes the cases or their
// judgement, so that replay judges alike.
FixtureMeta fixture_meta(const PropertyDef& prop, const Implementation& impl, const Problem& p,
                         const RunConfig& config, const Reproduce& reproduce,
                         const std::string& failed_path) {
  FixtureMeta m;
  m.property = prop.name;
  m.impl = impl.info().name;
  m.dtype = combo_name(combo_of(p));
  m.seed = config.seed;
  m.reproduce = reproduce.rc_params;
  m.attncheck = std::string(version());
  m.strict = config.strict;
  m.profile = std::string(profile_name(config.profile));
  if (config.cases > 0) m.cases = config.cases;
  if (config.timeout_ms > 0) m.timeout_ms = config.timeout_ms;
  if (!failed_path.empty()) m.path = failed_path;
  if (const double f = config.property_options.baseline_factor; f != kDefaultBaselineFactor) {
    m.baseline_factor = f;
  }
  return m;
}

}  // namespace

void report_failure(const PropertyDef& prop, const Implementation& impl, DType dtype,
                    const RunConfig& config, const CaseContext& ctx,
                    const Reproduce& reproduce, int passing, PropertyOutcome& out,
                    const std::string& found) {
  out.status = PropertyStatus::failed;
  std::ostringstream report;
  report << fmt::format("FAILED {} on {} ({})\n", prop.name, impl.info().name,
                        dtype_name(dtype));
  report << found;
  report << "  " << ctx.failure_message;
  if (!ctx.failure_message.ends_with('\n')) report << "\n";
  // The dispatch path of the failing call, whose precision judged it.
  if (!ctx.failed_path.empty()) {
    report << fmt::format("  path: the failing call took path '{}' and was judged by its "
                          "precision\n",
                          ctx.failed_path);
  }
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
      const auto copied = [](const std::shared_ptr<const Problem>& q) {
        return q ? std::optional<Problem>(*q) : std::nullopt;
      };
      FailureRecord record{p, copied(ctx.failed_call), std::nullopt, std::nullopt};
      if (ctx.failures > 1 && ctx.first_failed_case) {
        record.unshrunk = ctx.first_failed_case->problem;
        record.unshrunk_call = copied(ctx.first_failed_call);
      }
      out.diagnosis = diagnose_failure(impl, record);
    } else if (const std::string_view d = death_diagnosis(ctx.failure_signal); !d.empty()) {
      out.diagnosis = {std::string(d)};  // the death's own class (SIGILL)
    }
    report << (ctx.failure_died && out.diagnosis.empty()
                   ? "  diagnosis: none (the call did not return, so there is no output to "
                     "explain)\n"
                   : describe_diagnosis(out.diagnosis));
    // Known findings (RunConfig::known_findings): the one that explains an
    // xfail's every offending call, or those that explain only some calls
    // of a failure, which therefore still fails.
    if (ctx.seek == CaseContext::Seek::explained &&
        ctx.explained_finding < config.known_findings.size()) {
      const KnownFinding& k = config.known_findings[ctx.explained_finding];
      report << fmt::format("  expected: known finding {} ({}) explains {}: {}\n", k.finding,
                            k.cause,
                            ctx.failure_died ? "the death" : "every offending element", k.reason);
    } else if (!ctx.failure_also_explained.empty()) {
      out.also_explained = ctx.failure_also_explained;
      std::string names;
      for (const std::string& n : ctx.failure_also_explained)
        names += (names.empty() ? "" : ", ") + n;
      report << fmt::format("  also explained by known finding {} in part, not wholly: a "
                            "failure of its own\n",
                            names);
    }
    if (!config.save_failures_dir.empty()) {
      Fixture f;
      f.problem = p;
      f.args = ctx.failed_case->args;
      f.meta = fixture_meta(prop, impl, p, config, reproduce, ctx.failed_path);
      const std::string path =
          fixture_path(config.save_failures_dir, impl.info().name, dtype, prop.name);
      try {
        out.fixture = save_failure_fixture(config.save_failures_dir, path, f);
        if (out.fixture != path) {
          report << fmt::format("  (saved beside {}, which another run sharing the folder "
                                "wrote during this one)\n",
                                path);
        }
      } catch (const std::exception& e) {
        out.fixture_error = e.what();
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
      : info.origin.ends_with(".py") ? fmt::format(" --python {}", shell_word(info.origin + ":" + info.name))
                                     : fmt::format(" --plugin {}", shell_word(info.origin));
  // A mixed combination is spelled as --dtype took it (SPEC 5.2).
  const std::string dtype_arg = config.combo ? combo_name(*config.combo) : std::string(dtype_name(dtype));
  if (!config.test_program.empty()) {
    // A GoogleTest program: the same test again, with the run's variables
    // (a real-size failure replays the whole run from its seed).
    std::string vars = fmt::format("ATTNCHECK_SEED={}", config.seed);
    if (config.profile != Profile::ci) vars += fmt::format(" ATTNCHECK_PROFILE={}", profile_name(config.profile));
    if (config.cases > 0) vars += fmt::format(" ATTNCHECK_TEST_CASES={}", config.cases);
    if (reproduce.kind == Reproduce::Kind::rc_params) {
      report << fmt::format("  reproduce: RC_PARAMS=\"{}\" {} {}\n", reproduce.rc_params, vars,
                            config.test_program);
    } else if (reproduce.kind == Reproduce::Kind::whole_run) {
      report << fmt::format("  reproduce: {} {}\n", vars, config.test_program);
    }
    if (out.fixture) {
      report << fmt::format("  fixture: {}  (rerun: ATTNCHECK_REPLAY={} {})\n", *out.fixture,
                            shell_word(*out.fixture), config.test_program);
    }
    out.message = report.str();
    return;
  }
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
    report << "  fixture: " << *out.fixture << "  (rerun: attncheck replay "
           << shell_word(*out.fixture) << plugin << ")\n";
  }
  out.message = report.str();
}

}  // namespace attncheck
