// A check session (attncheck/session.h): the work list of implementations x
// dtypes x properties and its shard, expected failures, interruption, and
// the reporters each outcome goes to.

#include "attncheck/session.h"

#include <algorithm>
#include <map>
#include <functional>
#include <string_view>

#include <fmt/format.h>

#include "core/cancel.h"
#include "core/text.h"
#include "host/isolation.h"
#include "attncheck/registry.h"
#include "attncheck/reporters.h"
#include "attncheck/run.h"
#include "properties/case_context.h"
#include "properties/property_def.h"
#include "run/config.h"
#include "run/parallel_session.h"
#include "run/saved_failures.h"
#include "run/run_property.h"

namespace attncheck {

uint64_t parse_seed(const std::string& text, std::string_view where) {
  size_t used = 0;
  unsigned long long s = 0;
  try {
    s = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || s >= (1ull << 53) || text[0] == '-') {
    throw InputError(fmt::format("{}: '{}' is not a seed (an integer below 2^53)", where, text));
  }
  return s;
}

uint64_t resolve_seed(const std::optional<std::string>& given, std::string_view given_name) {
  return configured_seed(given, given_name, process_environment());
}

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  // K/N in plain decimal digits, no sign, space or leading zero: one
  // spelling per shard, so that " 1/2" and "01/02" are not quietly 1/2.
  const auto number = [](std::string_view digits) {
    const bool plain = !digits.empty() && digits.size() <= 9 && digits[0] != '0' &&
                       digits.find_first_not_of("0123456789") == std::string_view::npos;
    return plain ? std::stoi(std::string(digits)) : 0;
  };
  const size_t slash = text.find('/');
  const int k = slash == std::string::npos ? 0 : number(std::string_view(text).substr(0, slash));
  const int n = slash == std::string::npos ? 0 : number(std::string_view(text).substr(slash + 1));
  if (n < 1 || k < 1 || k > n) {
    throw InputError(fmt::format("--shard: '{}' is not K/N (decimal digits, 1 <= K <= N, no sign, "
                                 "space or leading zero)",
                                 printable(text)));
  }
  return {k, n};
}

std::vector<std::shared_ptr<const Implementation>> default_impls() {
  std::vector<std::shared_ptr<const Implementation>> impls;
  for (const auto& impl : every_impl()) {
    const Kind k = impl->info().kind;
    if (k == Kind::reference || k == Kind::adapter || k == Kind::layer) impls.push_back(impl);
  }
  return impls;
}

std::vector<DType> session_dtypes(const ImplInfo& info, std::optional<DType> only) {
  std::vector<DType> dtypes;
  for (DType d : kAllDTypes) {
    if (only ? d == *only : info.supports_output(d)) dtypes.push_back(d);
  }
  return dtypes;
}

std::vector<WorkItem> work_list(const SessionConfig& config) {
  const auto impls = config.impls.empty() ? default_impls() : config.impls;
  std::vector<const PropertyInfo*> props = config.properties;
  if (props.empty()) {
    for (const PropertyInfo& p : property_catalog()) props.push_back(&p);
  }
  std::vector<WorkItem> items;
  int item = -1;  // position in the whole list
  for (const auto& impl : impls) {
    for (DType d : session_dtypes(impl->info(), config.dtype)) {
      for (const PropertyInfo* prop : props) {
        if (++item % config.shard.count != config.shard.index - 1) continue;
        items.push_back({impl, d, prop});
      }
    }
  }
  return items;
}

void apply_expected_failures(const ExpectedFailures& expected, PropertyOutcome& o) {
  if (!expected.expects(o.impl, o.property)) return;
  if (o.status == PropertyStatus::failed) o.status = PropertyStatus::xfail;
  if (o.status == PropertyStatus::passed) {
    o.status = PropertyStatus::xpass;
    o.message = "passed, but " + expected.path + " expects a failure: " + o.message;
  }
}

void note_findings_gone(const ExpectedFailures& expected, const Implementation& impl,
                        PropertyOutcome& o) {
  if (o.status != PropertyStatus::passed) return;
  for (const ExpectedFinding& f : expected.findings) {
    if (!f.applies(o.impl, o.property)) continue;
    Fixture fixture = load_fixture(f.finding.fixture);
    // The fixture speaks for its own property and output format only.
    if (fixture.meta.property.value_or("") != o.property || fixture.problem.dtype != o.dtype ||
        (o.combo && !(*o.combo == combo_of(fixture.problem)))) {
      continue;
    }
    // Judged by the path each call names, not the one the fixture's
    // failing call took (a twin of the kernel may lack it).
    fixture.meta.path.reset();
    PropertyOutcome replayed;
    try {
      replayed = replay_fixture(fixture, impl, replay_config(fixture));
    } catch (const InputError&) {
      continue;  // a format or part it does not declare: the finding is not judged here
    }
    if (replayed.status != PropertyStatus::passed) continue;
    o.status = PropertyStatus::xpass;
    o.expected = f.finding;
    o.message = fmt::format(
        "passed, and the fixture {} of known finding {} ({}) no longer fails: the finding is "
        "gone, remove its entry from {}; {}",
        f.finding.fixture, f.finding.finding, f.finding.cause, expected.path, o.message);
    return;
  }
}

int SessionResult::count(PropertyStatus s) const {
  const auto it = counts.find(s);
  return it == counts.end() ? 0 : it->second;
}

bool SessionResult::failed() const {
  return count(PropertyStatus::failed) + count(PropertyStatus::xpass) > 0;
}

namespace {

// One item of the work list, as --jobs 1 and each process of --jobs N run it.
PropertyOutcome run_item(const SessionConfig& config, const WorkItem& item,
                         const std::optional<SavedFixture>& saved_fixture,
                         const std::function<bool()>& cancelled) {
  const PropertyDef& prop = property_def(*item.property);
  PropertyOutcome o;
  const auto* isolated = dynamic_cast<const IsolatedImplementation*>(item.impl.get());
  if (cancelled()) {
    o = blank_outcome(prop, *item.impl, item.dtype);
    o.status = PropertyStatus::not_run;
    o.message = "interrupted";
  } else if (isolated && isolated->out_of_hangs()) {
    // The run's bound on hangs (docs/isolation.md): what needs no call
    // keeps its verdict, the rest is not run.
    auto skip = outcome_without_calls(prop, *item.impl, item.dtype, config.run);
    if (skip) {
      o = std::move(*skip);
    } else {
      o = blank_outcome(prop, *item.impl, item.dtype);
      o.combo = config.run.combo;
      o.status = PropertyStatus::not_run;
      o.message = fmt::format(
          "not run: the implementation hung {} times in this run, the bound on a run "
          "(docs/isolation.md); the failed properties give its hanging cases",
          kMaxHangsPerRun);
    }
  } else {
    if (isolated) isolated->begin_property();
    // The known findings of this implementation and property: the
    // failures they explain are set aside, xfail when nothing else fails.
    RunConfig run = config.run;
    run.known_findings = config.expected_failures.findings_for(item.impl->info().name, prop.name);
    // The failure database: this item's fixture an earlier run saved.
    std::optional<SavedReplay> saved;
    if (saved_fixture) saved = replay_saved_failure(*saved_fixture, *item.impl, run);
    o = run_property(prop, *item.impl, item.dtype, run);
    if (saved) settle_saved_failure(*saved, o);
    note_findings_gone(config.expected_failures, *item.impl, o);
    if (cancelled()) {
      // Interrupted mid-property: what it found is not a verdict.
      o = blank_outcome(prop, *item.impl, item.dtype);
      o.status = PropertyStatus::not_run;
      o.message = "interrupted";
    }
  }
  apply_expected_failures(config.expected_failures, o);
  return o;
}

}  // namespace

SessionResult run_session(const SessionConfig& config, const std::vector<Reporter*>& reporters) {
  SessionConfig session = config;
  if (session.impls.empty()) session.impls = default_impls();
  if (session.isolation) {
    for (auto& impl : session.impls) impl = isolate(impl, *session.isolation);
  }
  SessionResult result;
  result.seed = config.run.seed;
  result.profile = config.run.profile;
  result.shard = config.shard;
  // The config's flag, or the process's (request_cancel, from SIGINT /
  // SIGTERM: an isolated call waiting on a hang gives up at once).
  const std::function<bool()> cancelled = [&] {
    return (config.cancel && config.cancel->load()) || cancel_requested();
  };
  for (Reporter* r : reporters) r->on_start(result.seed, result.profile, result.shard);
  const std::vector<WorkItem> items = work_list(session);
  // The failure database's fixtures as they are before any item runs.
  std::vector<std::optional<SavedFixture>> saved(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    saved[i] = find_saved_failure(*items[i].property, items[i].impl->info().name, items[i].dtype,
                                  session.run);
  const auto done = [&](PropertyOutcome&& o) {
    for (Reporter* r : reporters) r->on_outcome(o);
    if (o.status == PropertyStatus::passed) {
      result.max_budget[o.impl] = std::max(result.max_budget[o.impl], o.max_budget_used);
    }
    ++result.counts[o.status];
    result.outcomes.push_back(std::move(o));
  };
  if (config.jobs <= 1 || items.size() <= 1) {
    for (size_t i = 0; i < items.size(); ++i) done(run_item(session, items[i], saved[i], cancelled));
  } else {
    const auto blank = [&](size_t i, std::string message) {
      const WorkItem& item = items[i];
      PropertyOutcome o = blank_outcome(property_def(*item.property), *item.impl, item.dtype);
      o.combo = config.run.combo;
      o.status = PropertyStatus::not_run;
      o.message = std::move(message);
      return o;
    };
    // The hangs each isolated implementation met before this session (the
    // Python checker runs several on one): its items count from there, and
    // it counts on with those its items met in the processes.
    const auto isolated_of = [&](size_t i) {
      return dynamic_cast<const IsolatedImplementation*>(items[i].impl.get());
    };
    std::map<const IsolatedImplementation*, int> hangs_at_start;
    for (size_t i = 0; i < items.size(); ++i)
      if (const auto* iso = isolated_of(i)) hangs_at_start.emplace(iso, iso->hangs_in_run());
    ParallelCallbacks cb;
    // The implementation whose worker a process kept from its last item:
    // a process starting an item of another one stops its idle workers
    // first, so N processes hold about N workers, not N times the LRU's 32
    // (a thorough run of the LibTorch and ggml adapters, a worker of about
    // 1 GB each, was killed for memory otherwise).
    const Implementation* last_impl = nullptr;
    cb.run_item = [&](size_t i, int hangs_before) {
      if (items[i].impl.get() != last_impl) {
        stop_idle_workers();
        last_impl = items[i].impl.get();
      }
      const auto* isolated = isolated_of(i);
      int before = 0;
      if (isolated) {
        // The hangs of the items before this one, wherever they ran.
        isolated->set_hangs_in_run(hangs_at_start[isolated] + hangs_before);
        before = isolated->hangs_in_run();
      }
      ItemRun run{run_item(session, items[i], saved[i], cancelled), 0};
      if (isolated) run.hangs = isolated->hangs_in_run() - before;
      return run;
    };
    cb.outcome_of_death = [&](size_t i, const std::string& how) {
      PropertyOutcome o = blank(
          i, fmt::format("FAILED {} on {}: the check process running it (--jobs {}) {}; run "
                         "--jobs 1 for the counterexample",
                         items[i].property->name, items[i].impl->info().name, config.jobs, how));
      o.status = PropertyStatus::failed;
      return o;
    };
    cb.hangs_key = [&](size_t i) {
      return static_cast<size_t>(std::find(session.impls.begin(), session.impls.end(),
                                           items[i].impl) -
                                 session.impls.begin());
    };
    cb.threads = [&](size_t i) { return static_cast<int>(items[i].impl->info().threads); };
    cb.done = [&](size_t i, PropertyOutcome&& o, int hangs) {
      if (const auto* iso = isolated_of(i); iso && hangs > 0)
        iso->set_hangs_in_run(iso->hangs_in_run() + hangs);
      done(std::move(o));
    };
    cb.cancelled = cancelled;
    cb.not_started = [&](size_t i) { return blank(i, "interrupted"); };
    run_in_parallel(items.size(), config.jobs, cb);
  }
  result.interrupted = cancelled();
  for (Reporter* r : reporters) r->on_finish(result);
  return result;
}

}  // namespace attncheck
