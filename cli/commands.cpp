// attncheck: the command line (SPEC 5.2). Thin: parses, calls the library,
// prints, and maps outcomes to exit codes. main() is in main.cpp, so the
// fuzz targets (tests/fuzz/) can drive run_cli in-process.

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "attncheck/cancel.h"
#include "attncheck/error.h"
#include "attncheck/fixture.h"
#include "attncheck/isolation.h"
#include "attncheck/modules.h"
#include "attncheck/oracle.h"
#include "attncheck/plugin_loader.h"
#include "attncheck/properties.h"
#include "attncheck/registry.h"
#include "attncheck/report.h"
#include "bench/bench.h"
#include "commands.h"

namespace {

using namespace attncheck;

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitInterrupted = 3;

// Relative to the working directory: a project keeps its own list.
const std::string kExpectedFailuresPath = "fixtures/expected-failures.json";

std::atomic<bool> interrupted{false};

void on_interrupt(int) {
  interrupted = true;
  request_cancel();  // a waiting isolated call gives up within moments
}

struct CheckOptions {
  std::vector<std::string> impls, plugins, properties;
  std::string dtype, profile = "ci", shard, report, save_failures = "attncheck-failures";
  int cases = 0;
  std::string seed;
  bool strict = false, no_isolation = false;
  int64_t timeout_ms = kDefaultCallTimeoutMs;
};

// Every implementation the command will call, behind a worker process
// unless --no-isolation (attncheck/isolation.h).
std::shared_ptr<const Implementation> maybe_isolate(std::shared_ptr<const Implementation> impl,
                                                    bool no_isolation, int64_t timeout_ms) {
  if (no_isolation) return impl;
  return isolate(std::move(impl), IsolationOptions{timeout_ms});
}

// Writes `text` beside `path` and renames it over `path`, so a reader never
// sees half a report and an earlier one is never lost to a failed write.
void write_atomically(const std::string& path, const std::string& text, const char* what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw InputError(fmt::format("{}: cannot write '{}'", what, tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(fmt::format("{}: cannot replace '{}'", what, path));
  }
}

uint64_t parse_seed(const std::string& text, const std::string& where) {
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

using ImplList = std::vector<std::shared_ptr<const Implementation>>;

// The implementation of this name among the loaded plugins' and the
// built-ins (load_plugins has made the names unique), or nullptr.
std::shared_ptr<const Implementation> find_any(const ImplList& plugins, const std::string& name) {
  for (const auto& impl : plugins)
    if (impl->info().name == name) return impl;
  return find_impl(name);
}

// The plugins at `paths`, loaded in workers unless --no-isolation.
ImplList load_plugins_for(const std::vector<std::string>& paths, bool no_isolation,
                          int64_t timeout_ms) {
  if (no_isolation) return load_plugins(paths);
  return load_plugins_isolated(paths, IsolationOptions{timeout_ms});
}

int list_command(const std::vector<std::string>& plugin_paths) {
  ImplList impls = registered_impls();
  for (auto& impl : load_plugins_for(plugin_paths, false, kDefaultCallTimeoutMs)) {
    impls.push_back(std::move(impl));
  }
  fmt::print("implementations:\n");
  for (const auto& impl : impls) {
    const ImplInfo& i = impl->info();
    std::vector<std::string> dtypes;
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16})
      if (i.supports(d)) dtypes.emplace_back(dtype_name(d));
    // Joined first: a width applied to fmt::join pads every element.
    fmt::print("  {:<34} {:<9} {:<9} {}\n", i.name, kind_name(i.kind),
               fmt::format("{}", fmt::join(dtypes, ",")), i.description);
  }
  fmt::print("properties:\n");
  for (const PropertyDef& p : property_catalog()) {
    fmt::print("  {:<34} {}\n", p.name, p.statement);
  }
  return kExitOk;
}

void print_outcome(const PropertyOutcome& o) {
  const bool long_message = o.status == PropertyStatus::failed || o.status == PropertyStatus::xfail;
  fmt::print("{:<11} {:<24} {:<4} {:<28} {}\n", status_name(o.status), o.impl,
             dtype_name(o.dtype), o.property, long_message ? "" : o.message);
  if (long_message) fmt::print("{}\n", o.message);
  std::fflush(stdout);
}

int replay_command(const std::string& path, const std::string& impl_name,
                   const std::vector<std::string>& plugin_paths, bool no_isolation,
                   int64_t timeout_ms) {
  const ImplList plugins = load_plugins_for(plugin_paths, no_isolation, timeout_ms);
  const Fixture f = load_fixture(path);
  std::string name = impl_name.empty() ? f.meta.value("impl", std::string()) : impl_name;
  // A fixture saved for another implementation is judged on the plugin's
  // one implementation when the plugin has just one.
  if (impl_name.empty() && plugins.size() == 1 && !find_any(plugins, name)) {
    name = plugins.front()->info().name;
  }
  if (name.empty()) throw InputError(path + ": meta.impl is missing; name one with --impl");
  const auto impl = find_any(plugins, name);
  if (!impl) throw InputError(fmt::format("--impl: unknown implementation '{}' (see attncheck list)", name));
  RunConfig config;
  config.seed = f.meta.value("seed", kDefaultSeed);
  PropertyOutcome o;
  try {
    o = replay_fixture(f, *maybe_isolate(impl, no_isolation, timeout_ms), config);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
  print_outcome(o);
  return o.status == PropertyStatus::failed ? kExitFailed : kExitOk;
}

int merge_command(const std::string& out_path, const std::vector<std::string>& inputs) {
  nlohmann::json merged;
  for (const std::string& path : inputs) {
    // Within the size and nesting limits; errors are one line naming the file.
    const nlohmann::json j = read_json_file(path);
    // Types checked before any value() or get<>(), which would throw
    // nlohmann's type_error: an internal error, not the file's.
    if (!j.is_object() || !j.contains("format") || j["format"] != "attncheck-report-1") {
      throw InputError(path + ": field 'format': not an attncheck-report-1 report");
    }
    if (!j.contains("results") || !j["results"].is_array()) {
      throw InputError(path + ": field 'results': expected an array of results");
    }
    for (const auto& r : j["results"]) {
      if (!r.is_object() || (r.contains("status") && !r["status"].is_string())) {
        throw InputError(path + ": field 'results': every result must be an object whose "
                                "'status' is a string");
      }
    }
    if (merged.is_null()) {
      merged = j;
      continue;
    }
    for (const char* key : {"seed", "profile"}) {
      if (j.value(key, nlohmann::json()) != merged.value(key, nlohmann::json())) {
        throw InputError(fmt::format("{}: field '{}' differs from the first report's", path, key));
      }
    }
    for (const auto& r : j["results"]) merged["results"].push_back(r);
  }
  write_atomically(out_path, merged.dump(2) + "\n", "merge-reports");
  int failed = 0;
  for (const auto& r : merged["results"]) {
    const std::string st = r.value("status", "");
    failed += st == "failed" || st == "xpass";
  }
  fmt::print("merged {} reports, {} results, {} failed\n", inputs.size(), merged["results"].size(), failed);
  return failed ? kExitFailed : kExitOk;
}

int oracle_command(const std::string& path) {
  const Fixture f = load_fixture(path);
  std::cout << oracle_to_json(f.problem, oracle(f.problem)).dump(1) << "\n";
  return kExitOk;
}

struct Shard {
  int index = 0, count = 1;  // 0-based index
};

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  const size_t slash = text.find('/');
  int k = 0, n = 0;
  try {
    size_t used_k = 0, used_n = 0;
    k = std::stoi(text.substr(0, slash), &used_k);
    n = std::stoi(text.substr(slash + 1), &used_n);
    if (slash == std::string::npos || used_k != slash || used_n != text.size() - slash - 1) n = 0;
  } catch (const std::exception&) {
    n = 0;
  }
  if (n < 1 || k < 1 || k > n) {
    throw InputError(fmt::format("--shard: '{}' is not K/N with 1 <= K <= N", text));
  }
  return {k - 1, n};
}

// (impl, property) pairs that fail because of known upstream behaviour.
using ExpectedFailures = std::set<std::pair<std::string, std::string>>;

ExpectedFailures load_expected_failures(const std::string& path) {
  ExpectedFailures out;
  if (!std::ifstream(path)) return out;  // no file: nothing expected to fail
  const nlohmann::json j = read_json_file(path);  // size and nesting limits
  const nlohmann::json& list = j.is_object() ? j.value("expected_failures", nlohmann::json()) : j;
  if (!list.is_array()) throw InputError(path + ": expected an array of {impl, property, reason}");
  for (const auto& e : list) {
    if (!e.is_object() || !e.contains("impl") || !e.contains("property") ||
        !e["impl"].is_string() || !e["property"].is_string()) {
      throw InputError(path + ": every entry needs string fields 'impl' and 'property'");
    }
    out.emplace(e["impl"].get<std::string>(), e["property"].get<std::string>());
  }
  return out;
}

int check_command(const CheckOptions& opt) {
  // Loaded first: a bad plugin is exit 2 before anything runs.
  const ImplList plugins = load_plugins_for(opt.plugins, opt.no_isolation, opt.timeout_ms);
  const Shard shard = parse_shard(opt.shard);
  const ExpectedFailures expected_failures = load_expected_failures(kExpectedFailuresPath);
  if (opt.profile != "ci" && opt.profile != "thorough") {
    throw InputError(fmt::format("--profile: unknown profile '{}' (expected ci or thorough)", opt.profile));
  }
  RunConfig config;
  config.profile = opt.profile;
  config.cases = opt.cases;
  config.strict = opt.strict;
  config.save_failures_dir = opt.save_failures;
  if (!opt.seed.empty()) {
    config.seed = parse_seed(opt.seed, "--seed");
  } else if (const char* env = std::getenv("ATTNCHECK_SEED"); env && *env) {
    config.seed = parse_seed(env, "ATTNCHECK_SEED");
  } else {
    config.seed = kDefaultSeed;
  }

  std::vector<std::shared_ptr<const Implementation>> impls;
  if (opt.impls.empty() && !plugins.empty()) {
    impls = plugins;
  } else if (opt.impls.empty()) {
    for (const auto& impl : registered_impls()) {
      const Kind k = impl->info().kind;
      if (k == Kind::reference || k == Kind::adapter || k == Kind::layer) impls.push_back(impl);
    }
  } else {
    for (const std::string& name : opt.impls) {
      auto impl = find_any(plugins, name);
      if (!impl) throw InputError(fmt::format("--impl: unknown implementation '{}' (see attncheck list)", name));
      impls.push_back(impl);
    }
  }
  for (auto& impl : impls) impl = maybe_isolate(impl, opt.no_isolation, opt.timeout_ms);
  std::vector<const PropertyDef*> props;
  if (opt.properties.empty()) {
    for (const PropertyDef& p : property_catalog()) props.push_back(&p);
  } else {
    for (const std::string& name : opt.properties) {
      const PropertyDef* p = find_property(name);
      if (!p) throw InputError(fmt::format("--property: unknown property '{}' (see attncheck list)", name));
      props.push_back(p);
    }
  }
  std::optional<DType> only_dtype;
  if (!opt.dtype.empty()) only_dtype = parse_dtype(opt.dtype);
  if (!opt.report.empty()) {  // fail before any work if the report cannot be written
    const std::string tmp = opt.report + ".tmp";
    if (!std::ofstream(tmp)) throw InputError(fmt::format("--report: cannot write '{}'", opt.report));
    std::remove(tmp.c_str());
  }

  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  fmt::print("attncheck {}: seed {}, profile {}{}\n", version(), config.seed, config.profile,
             shard.count > 1 ? fmt::format(", shard {}/{}", shard.index + 1, shard.count) : "");
  std::vector<PropertyOutcome> outcomes;
  std::map<std::string, double> max_budget;
  std::map<std::string, PropertyOutcome> hangs;  // impl -> the property that hung
  int item = -1;  // position in the full work list, for sharding
  for (const auto& impl : impls) {
    std::vector<DType> dtypes;
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      if (only_dtype ? d == *only_dtype : impl->info().supports(d)) dtypes.push_back(d);
    }
    for (DType d : dtypes) {
      for (const PropertyDef* prop : props) {
        if (++item % shard.count != shard.index) continue;
        PropertyOutcome o;
        if (interrupted) {
          o.property = prop->name;
          o.impl = impl->info().name;
          o.kind = impl->info().kind;
          o.dtype = d;
          o.status = PropertyStatus::not_run;
          o.message = "interrupted";
        } else if (const auto h = hangs.find(impl->info().name); h != hangs.end()) {
          // Hung on the smallest problem of an earlier property: not
          // called again, each remaining property fails with that case.
          o = h->second;
          o.property = prop->name;
          o.dtype = d;
          o.message = fmt::format("not called: the implementation hangs on the smallest problem "
                                  "of {} (see its fixture)",
                                  h->second.property);
        } else {
          const auto* isolated = dynamic_cast<const IsolatedImplementation*>(impl.get());
          if (isolated) isolated->begin_property();
          o = run_property(*prop, *impl, d, config);
          if (cancel_requested()) {
            o.status = PropertyStatus::not_run;
            o.message = "interrupted";
            o.fixture.reset();
            o.counterexample.reset();
            o.diagnosis.clear();
          } else if (isolated && o.status == PropertyStatus::failed && isolated->hung()) {
            hangs.emplace(o.impl, o);
          }
        }
        if (expected_failures.count({o.impl, o.property})) {
          if (o.status == PropertyStatus::failed) o.status = PropertyStatus::xfail;
          if (o.status == PropertyStatus::passed) {
            o.status = PropertyStatus::xpass;
            o.message = "passed, but " + kExpectedFailuresPath + " expects a failure: " + o.message;
          }
        }
        print_outcome(o);
        if (o.status == PropertyStatus::passed) {
          max_budget[o.impl] = std::max(max_budget[o.impl], o.max_budget_used);
        }
        outcomes.push_back(std::move(o));
      }
    }
  }

  std::map<PropertyStatus, int> counts;
  for (const auto& o : outcomes) ++counts[o.status];
  for (const auto& [name, budget] : max_budget) {
    fmt::print("largest budget used by a passing case: {:<24} {:.3g}\n", name, budget);
  }
  fmt::print("{} passed, {} failed, {} skipped, {} unsupported, {} xfail, {} xpass, {} not-run\n",
             counts[PropertyStatus::passed], counts[PropertyStatus::failed],
             counts[PropertyStatus::skipped], counts[PropertyStatus::unsupported],
             counts[PropertyStatus::xfail], counts[PropertyStatus::xpass],
             counts[PropertyStatus::not_run]);
  if (!opt.report.empty()) {
    write_atomically(opt.report, report_json(outcomes, config.seed, config.profile).dump(2) + "\n",
                     "--report");
  }
  if (interrupted) return kExitInterrupted;
  return counts[PropertyStatus::failed] + counts[PropertyStatus::xpass] > 0 ? kExitFailed : kExitOk;
}

}  // namespace

namespace attncheck::cli {

int run_cli(int argc, char** argv) {
  // The LibTorch adapters (attncheck_torch.so) and any other built-in
  // module; one that cannot be loaded is said, and the rest goes on.
  for (const std::string& problem : load_builtin_modules()) {
    std::cerr << "attncheck: warning: " << problem << "\n";
  }
  CLI::App app{"attncheck: property-based verification of attention implementations"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(version()));

  std::vector<std::string> list_plugins;
  CLI::App* list = app.add_subcommand("list", "implementations (with kind) and properties");
  list->add_option("--plugin", list_plugins,
                   "also list this plugin's implementations (repeatable)");

  CheckOptions opt;
  CLI::App* check = app.add_subcommand("check", "run the property suite");
  check->add_option("--impl", opt.impls, "implementation to check (repeatable; default: every "
                                         "reference, adapter and layer implementation)");
  check->add_option("--plugin", opt.plugins,
                    "shared library exporting attncheck_plugin_impls (repeatable); without "
                    "--impl, every implementation it exports is checked");
  check->add_option("--property", opt.properties, "property to run (repeatable; default: all)");
  check->add_option("--dtype", opt.dtype, "only this dtype: f64, f32, bf16, f16");
  check->add_option("--cases", opt.cases, "cases per property (default: the profile's)")
      ->check(CLI::PositiveNumber);
  check->add_option("--seed", opt.seed, "seed below 2^53 (default: ATTNCHECK_SEED, else fixed)");
  check->add_option("--profile", opt.profile, "ci (default) or thorough");
  check->add_option("--shard", opt.shard, "K/N: run the K-th of N shards");
  check->add_flag("--strict", opt.strict, "NaN at masked keys, not only large values");
  check->add_option("--timeout-ms", opt.timeout_ms,
                    fmt::format("per-call limit of CPU time of an isolated implementation "
                                "(default {}; a call blocked for {} times as long in wall time "
                                "is stopped too)",
                                kDefaultCallTimeoutMs, kWallTimeoutFactor))
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  check->add_flag("--no-isolation", opt.no_isolation,
                  "run implementations in this process (for a debugger; a crash then ends "
                  "the run)");
  check->add_option("--report", opt.report, "write the JSON report here");
  check->add_option("--save-failures", opt.save_failures, "directory for failure fixtures");

  std::string replay_path, replay_impl;
  std::vector<std::string> replay_plugins;
  bool replay_no_isolation = false;
  int64_t replay_timeout_ms = kDefaultCallTimeoutMs;
  CLI::App* replay = app.add_subcommand("replay", "judge a saved fixture's case again");
  replay->add_option("FIXTURE", replay_path, "fixture JSON")->required();
  replay->add_option("--impl", replay_impl, "implementation (default: the fixture's)");
  replay->add_option("--plugin", replay_plugins,
                     "load this plugin; its implementation judges the case (default: the "
                     "fixture's implementation if it exports it, else its only one)");
  replay->add_option("--timeout-ms", replay_timeout_ms, "per-call limit of CPU time, as for check")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  replay->add_flag("--no-isolation", replay_no_isolation, "run the implementation in this process");

  std::string merge_out;
  std::vector<std::string> merge_in;
  CLI::App* merge = app.add_subcommand("merge-reports", "join the --report files of shards");
  merge->add_option("OUT", merge_out, "merged report")->required();
  merge->add_option("IN", merge_in, "reports to join")->required();

  bench::BenchOptions bench_opt;
  CLI::App* bench_cmd = bench::add_bench_command(app, bench_opt);

  std::string oracle_path;
  CLI::App* oracle_cmd = app.add_subcommand("oracle", "exact results of a problem or fixture as JSON");
  oracle_cmd->add_option("FILE", oracle_path, "problem or fixture JSON")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "attncheck: " << e.what() << "\n";
    return kExitUsage;
  }
  try {
    if (app.got_subcommand("list")) return list_command(list_plugins);
    if (app.got_subcommand("oracle")) return oracle_command(oracle_path);
    if (app.got_subcommand("replay")) {
      return replay_command(replay_path, replay_impl, replay_plugins, replay_no_isolation,
                            replay_timeout_ms);
    }
    if (app.got_subcommand("merge-reports")) return merge_command(merge_out, merge_in);
    if (app.got_subcommand(bench_cmd)) return bench::bench_command(bench_opt);
    return check_command(opt);
  } catch (const InputError& e) {
    std::cerr << "attncheck: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "attncheck: internal error: " << e.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace attncheck::cli
