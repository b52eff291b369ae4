// attncheck: the command line (SPEC 5.2). Thin: parses, calls the library,
// prints, and maps outcomes to exit codes. main() is in main.cpp, so the
// fuzz targets (tests/fuzz/) can drive run_cli in-process.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/cancel.h"
#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "formats/json.h"
#include "core/features.h"
#include "host/isolation.h"
#include "run/parallel_session.h"
#include "host/modules.h"
#include "attncheck/oracle.h"
#include "formats/output_file.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "attncheck/registry.h"
#include "formats/report.h"
#include "attncheck/reporters.h"
#include "attncheck/session.h"
#include "core/text.h"
#include "bench/bench.h"
#include "formats/declaration_text.h"
#include "host/impl_sources.h"
#include "run/config.h"
#include "commands.h"
#include "ggml_not_built.h"
#include "ort_not_built.h"

namespace {

// Why the ggml adapters are missing from this build ("" when they are
// built): set by impls/CMakeLists.txt.
constexpr const char* kGgmlNotBuilt = ATTNCHECK_GGML_NOT_BUILT;
// The same for the ONNX Runtime adapters (ort_*).
constexpr const char* kOrtNotBuilt = ATTNCHECK_ONNXRUNTIME_NOT_BUILT;

// The one line for an implementation name nothing registered; a ggml or
// ONNX Runtime adapter's name says why those adapters are missing.
std::string unknown_impl(std::string_view option, const std::string& name) {
  std::string line = fmt::format("{}: unknown implementation '{}' (see attncheck list)", option, name);
  if (name.starts_with("ggml_") && *kGgmlNotBuilt != '\0') {
    line += fmt::format("; the ggml adapters are not built: {}", kGgmlNotBuilt);
  }
  if (name.starts_with("ort_") && *kOrtNotBuilt != '\0') {
    line += fmt::format("; the ONNX Runtime adapters are not built: {}", kOrtNotBuilt);
  }
  return line;
}

using namespace attncheck;

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitInterrupted = 3;

// --cases above this is refused (exit 2): far past any profile's budget
// (the thorough profile runs 10x the CI cases, a few thousand at most), and
// below what would exhaust memory in the statistical properties.
constexpr int kMaxCases = 100000;

// Options naming a thing (an implementation, a file, a seed) refuse an
// empty value: "--seed ''" is a mistake, never the default.
const CLI::Validator kNonEmpty(
    [](std::string& s) { return s.empty() ? std::string("an empty value") : std::string(); },
    "NONEMPTY");

// --baseline-factor: AsAccurateAsBaseline's F (SPEC 2), a finite number of
// at least 1 (below 1 an implementation would have to beat the baseline).
const CLI::Validator kBaselineFactor(
    [](std::string& s) {
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      const bool ok = !s.empty() && end && *end == '\0' && std::isfinite(f) && f >= 1;
      return ok ? std::string() : std::string("expected a number of at least 1");
    },
    "F");

// --cases: a plain decimal integer from 1 to kMaxCases (CLI11's own range
// check would say only "Value 1e3 not in range").
const CLI::Validator kCases(
    [](std::string& s) {
      const bool digits = !s.empty() && s.size() <= 6 && s[0] != '0' &&
                          s.find_first_not_of("0123456789") == std::string::npos;
      const bool ok = digits && std::stoi(s) <= kMaxCases;
      return ok ? std::string()
                : fmt::format("'{}' is not a number of cases (an integer from 1 to {})",
                              printable(s), kMaxCases);
    },
    "N");

// An error line: its own words and up to kForeignTextChars of each foreign
// string in it (a path, a field), so a few of those.
constexpr size_t kMessageChars = 4 * kForeignTextChars;

// A waiting isolated call gives up within moments. The sender is noted:
// a signal from one of the run's own workers (an implementation that
// signals the harness) fails that implementation's call instead of ending
// the run (core/cancel.h).
void on_interrupt(int sig, siginfo_t* info, void*) { note_signal(sig, info ? info->si_pid : 0); }

struct CheckOptions {
  std::vector<std::string> impls, plugins, python, properties;
  std::string dtype, profile = "ci", shard, report, junit, save_failures = "attncheck-failures";
  int cases = 0;
  std::string seed;
  bool strict = false, no_isolation = false, no_real_sizes = false;
  bool save_failures_given = false;  ///< --save-failures named on the command line
  bool prune_fixed = false;          ///< --prune-fixed
  bool statistics = false;           ///< --statistics
  int64_t timeout_ms = kDefaultCallTimeoutMs;
  int64_t memory_limit_mb = kMemoryLimitHalfOfMachine;
  double baseline_factor = kDefaultBaselineFactor;
  int jobs = 0;  ///< --jobs; 0 = default_jobs
};

// The flags of `check` that configure the run (run/config.h adds the
// environment's variables).
RunFlags run_flags(const CheckOptions& opt) {
  RunFlags flags;
  if (!opt.seed.empty()) flags.seed = opt.seed;
  flags.profile = opt.profile;
  flags.cases = opt.cases;
  flags.strict = opt.strict;
  flags.real_sizes = !opt.no_real_sizes;
  flags.timeout_ms = opt.timeout_ms;
  flags.save_failures_dir = opt.save_failures;
  flags.prune_fixed = opt.prune_fixed;
  flags.property_options.baseline_factor = opt.baseline_factor;
  return flags;
}

// The implementations of --plugin and --python, in this process with
// --no-isolation (ImplSources, host/impl_sources.h).
ImplSources checking_sources(const std::vector<std::string>& plugins,
                             const std::vector<std::string>& python, bool no_isolation,
                             int64_t timeout_ms,
                             int64_t memory_limit_mb = kMemoryLimitHalfOfMachine) {
  ImplSources sources;
  sources.plugins = plugins;
  sources.python = python;
  sources.in_process = no_isolation;
  sources.timeout_ms = timeout_ms;
  sources.memory_limit_mb = memory_limit_mb;
  return sources;
}

// --dtype's text as a combination (SPEC 5.2); InputError "--dtype: ...".
DTypeCombo parse_combo_option(const std::string& text) {
  try {
    return parse_dtype_combo(text);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--dtype: {}", e.what()));
  }
}

int describe_command(const std::string& name, const std::vector<std::string>& plugin_paths,
                     const std::vector<std::string>& python, bool json) {
  const ImplList plugins = load_for_checking(checking_sources(plugin_paths, python, false, kDefaultCallTimeoutMs));
  const auto impl = find_implementation(plugins, name);
  if (!impl) throw InputError(unknown_impl("describe", name));
  if (json) {
    std::cout << implementation_json(impl->info()).dump(2) << "\n";
  } else {
    std::cout << declaration_text(impl->info());
  }
  return kExitOk;
}

int list_command(const std::vector<std::string>& plugin_paths,
                 const std::vector<std::string>& python, bool verbose) {
  ImplList impls = every_impl();
  for (auto& impl : load_for_checking(checking_sources(plugin_paths, python, false, kDefaultCallTimeoutMs))) {
    impls.push_back(std::move(impl));
  }
  if (verbose) {
    for (const auto& impl : impls) std::cout << declaration_text(impl->info());
    return kExitOk;
  }
  fmt::print("implementations:\n");
  for (const auto& impl : impls) {
    const ImplInfo& i = impl->info();
    // Each combination in --dtype's spelling (SPEC 5.2): single names
    // joined by commas as before, a mixed combination (itself holding
    // commas) set apart by a space.
    std::vector<std::string> combos;
    bool mixed = false;
    if (i.combos.empty()) {
      for (DType d : kAllDTypes)
        if (i.supports(d)) combos.emplace_back(dtype_name(d));
    }
    for (const DTypeCombo& c : i.combos) {
      combos.push_back(combo_name(c));
      mixed = mixed || !(c.q == c.out && c.kv == c.out);
    }
    // Joined first: a width applied to fmt::join pads every element.
    fmt::print("  {:<34} {:<9} {:<9} {}\n", i.name, kind_name(i.kind),
               fmt::format("{}", fmt::join(combos, mixed ? " " : ",")), i.description);
  }
  fmt::print("properties:\n");
  for (const PropertyInfo& p : property_catalog()) {
    fmt::print("  {:<34} {}\n", p.name, p.statement);
  }
  return kExitOk;
}

// What `replay` may override of what the fixture recorded; nullopt = the
// fixture's (or the default when it recorded none).
struct ReplayOptions {
  std::vector<std::string> paths;  ///< fixture files and folders of them
  std::string impl;
  std::vector<std::string> plugins, python;
  bool no_isolation = false;
  bool strict = false, no_strict = false;
  std::optional<int64_t> timeout_ms;
  int64_t memory_limit_mb = kMemoryLimitHalfOfMachine;
  std::optional<double> baseline_factor;
  std::string profile, dtype;
  int cases = 0;
};

int replay_command(const ReplayOptions& opt) {
  const std::string& impl_name = opt.impl;
  // Every fixture read (and its options checked) before any is judged: a
  // bad one is exit 2 naming it, with nothing run.
  struct Item {
    std::string path;
    Fixture fixture;
    RunConfig config;
  };
  std::vector<Item> items;
  for (const std::string& path : fixture_files(opt.paths)) {
    Fixture f = load_fixture(path);
    // The run's options as the fixture recorded them, then the flags.
    ReplayOverrides overrides;
    if (opt.strict) overrides.strict = true;
    if (opt.no_strict) overrides.strict = false;
    if (!opt.profile.empty()) overrides.profile = opt.profile;
    overrides.cases = opt.cases;
    overrides.timeout_ms = opt.timeout_ms;
    overrides.baseline_factor = opt.baseline_factor;
    RunConfig config = replay_config(f, overrides);
    // The case is the fixture's: a --dtype naming another is a mistake.
    if (!opt.dtype.empty() && parse_combo_option(opt.dtype) != combo_of(f.problem)) {
      throw InputError(fmt::format("--dtype: the fixture's problem is {}, not {} ({})",
                                   combo_name(combo_of(f.problem)), opt.dtype, path));
    }
    items.push_back({path, std::move(f), std::move(config)});
  }
  if (items.empty()) throw InputError("replay: no fixture (*.json) in the folders given");
  int64_t timeout_ms = kDefaultCallTimeoutMs;
  for (const Item& item : items)
    if (item.config.timeout_ms > 0) timeout_ms = std::max(timeout_ms, item.config.timeout_ms);
  const bool no_isolation = opt.no_isolation;
  const ImplSources sources =
      checking_sources(opt.plugins, opt.python, no_isolation, timeout_ms, opt.memory_limit_mb);
  const ImplList plugins = load_for_checking(sources);
  std::vector<std::shared_ptr<const Implementation>> impls;
  for (const Item& item : items) {
    std::string name = impl_name.empty() ? item.fixture.meta.impl.value_or("") : impl_name;
    // A fixture saved for another implementation is judged on the plugin's
    // one implementation when the plugin has just one.
    if (impl_name.empty() && plugins.size() == 1 && !find_implementation(plugins, name)) {
      name = plugins.front()->info().name;
    }
    if (name.empty()) throw InputError(item.path + ": meta.impl is missing; name one with --impl");
    const auto impl = find_implementation(plugins, name);
    if (!impl) {
      // The name is --impl's when given, else the fixture's own.
      if (!impl_name.empty()) throw InputError(fmt::format("{} ({})", unknown_impl("--impl", name), item.path));
      throw InputError(fmt::format("{}: {}", item.path, unknown_impl("field 'meta.impl'", name)));
    }
    impls.push_back(impl);
  }
  int failed = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    PropertyOutcome o;
    try {
      // Moved: a large fixture is then in memory once.
      o = replay_fixture(std::move(items[i].fixture), *for_calls(impls[i], sources), items[i].config);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", items[i].path, e.what()));
    }
    TextReporter(std::cout).on_outcome(o);
    failed += o.status == PropertyStatus::failed;
  }
  if (items.size() > 1) {
    fmt::print("replayed {} fixtures: {} still fail, {} now pass\n", items.size(), failed,
               items.size() - failed);
  }
  return failed ? kExitFailed : kExitOk;
}

int merge_command(const std::string& out_path, const std::vector<std::string>& inputs) {
  check_output_path(out_path, "merge-reports");  // before reading any input
  const nlohmann::json merged = merge_reports(inputs);
  write_output_file(out_path, merged.dump(2) + "\n", "merge-reports");
  const int failed = failing_results(merged);
  fmt::print("merged {} reports, {} results, {} failed\n", inputs.size(), merged["results"].size(), failed);
  return failed ? kExitFailed : kExitOk;
}

int oracle_command(const std::string& path) {
  const Fixture f = load_fixture(path);
  OracleResult r;
  try {
    r = oracle(f.problem);
  } catch (const NonFiniteInput& e) {
    throw InputError(fmt::format("{}: field '{}': {}", path, e.field, e.what()));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
  std::cout << oracle_to_json(f.problem, r).dump(1) << "\n";
  return kExitOk;
}

// Says on stderr, as it happens, each failure fixture that could not be
// saved (one line naming the file and the reason).
class FixtureErrors final : public Reporter {
 public:
  void on_start(uint64_t, Profile, const Shard&) override {}
  void on_outcome(const PropertyOutcome& o) override {
    if (!o.fixture_error) return;
    std::cerr << "attncheck: " << printable(*o.fixture_error, kMessageChars) << "\n";
    any_ = true;
  }
  void on_finish(const SessionResult&) override {}
  bool any() const { return any_; }

 private:
  bool any_ = false;
};

// Ctrl-C (or SIGTERM, SIGHUP) while the plugins load: the reports are still
// written, with no result, so a script reading them sees a run that
// checked nothing rather than a missing or stale file (exit 3 follows). A
// report that cannot be written then is left alone: the run is ending.
void write_reports_of_nothing(const CheckOptions& opt) {
  try {
    const RunConfig run = configure_run(run_flags(opt), process_environment());
    SessionResult nothing;
    nothing.interrupted = true;
    nothing.seed = run.seed;
    nothing.profile = run.profile;
    nothing.shard = parse_shard(opt.shard);
    std::vector<Reporter*> reporters;
    std::optional<JsonReporter> json;
    std::optional<JunitReporter> junit;
    if (!opt.report.empty()) reporters.push_back(&json.emplace(opt.report, "--report"));
    if (!opt.junit.empty()) reporters.push_back(&junit.emplace(opt.junit, "--junit"));
    for (Reporter* r : reporters) {
      r->on_start(nothing.seed, nothing.profile, nothing.shard);
      r->on_finish(nothing);
    }
  } catch (const std::exception&) {
  }
}

int check_command(const CheckOptions& opt) {
  // Loaded first: a bad plugin is exit 2 before anything runs.
  ImplList plugins;
  try {
    plugins = load_for_checking(checking_sources(opt.plugins, opt.python, opt.no_isolation,
                                                 opt.timeout_ms, opt.memory_limit_mb));
  } catch (const Cancelled&) {
    write_reports_of_nothing(opt);
    throw;
  }
  SessionConfig config;
  config.shard = parse_shard(opt.shard);
  config.expected_failures = load_expected_failures(kExpectedFailuresPath);
  config.run = configure_run(run_flags(opt), process_environment());

  // Without --impl: a plugin's implementations, else the session's default.
  if (opt.impls.empty()) config.impls = plugins;
  for (const std::string& name : opt.impls) {
    auto impl = find_implementation(plugins, name);
    if (!impl) throw InputError(unknown_impl("--impl", name));
    config.impls.push_back(impl);
  }
  if (!opt.no_isolation) config.isolation = IsolationOptions{opt.timeout_ms, opt.memory_limit_mb};
  config.jobs = opt.jobs > 0 ? opt.jobs
                             : default_jobs(opt.memory_limit_mb > 0 ? opt.memory_limit_mb
                                                                    : kPlannedMemoryPerJobMb);
  for (const std::string& name : opt.properties) {
    const PropertyInfo* p = find_property(name);
    if (!p) throw InputError(fmt::format("--property: unknown property '{}' (see attncheck list)", name));
    config.properties.push_back(p);
  }
  if (!opt.dtype.empty()) {
    // A single format selects that dtype as before; a mixed combination
    // runs in its output's dtype with the combination carried to the
    // properties (RunConfig::combo), which skip implementations that do not
    // declare it.
    const DTypeCombo combo = parse_combo_option(opt.dtype);
    config.dtype = combo.out;
    if (!(combo.q == combo.out && combo.kv == combo.out)) config.run.combo = combo;
  }
  TextReporter text(std::cout);
  text.show_statistics(opt.statistics);
  std::vector<Reporter*> reporters{&text};
  // Checked writable here, before any work.
  // A directory the user names is checked now; the default one only when
  // a failure is saved (a run in a read-only folder that fails nothing
  // needs none).
  if (opt.save_failures_given) check_output_directory(opt.save_failures, "--save-failures");
  if (!opt.report.empty() && !opt.junit.empty()) {
    // One file for both: the second writer would replace the first.
    std::error_code ec;
    const auto a = std::filesystem::weakly_canonical(std::filesystem::absolute(opt.report, ec), ec);
    const auto b = std::filesystem::weakly_canonical(std::filesystem::absolute(opt.junit, ec), ec);
    if (a == b) {
      throw InputError(fmt::format("--report and --junit name the same file '{}': one would "
                                   "replace the other", printable(opt.report)));
    }
  }
  std::optional<JsonReporter> json;
  std::optional<JunitReporter> junit;
  if (!opt.report.empty()) {
    std::vector<ImplInfo> infos;
    for (const auto& impl : config.impls.empty() ? default_impls() : config.impls) {
      infos.push_back(impl->info());
    }
    reporters.push_back(&json.emplace(opt.report, "--report", std::move(infos)));
  }
  if (!opt.junit.empty()) reporters.push_back(&junit.emplace(opt.junit, "--junit"));

  // A build without the ggml or the ONNX Runtime adapters says so once, on
  // the run's output.
  if (*kGgmlNotBuilt != '\0') std::cout << "note: the ggml adapters are not built: " << kGgmlNotBuilt << "\n";
  if (*kOrtNotBuilt != '\0') {
    std::cout << "note: the ONNX Runtime adapters are not built: " << kOrtNotBuilt << "\n";
  }
  FixtureErrors fixture_errors;
  reporters.push_back(&fixture_errors);
  const SessionResult result = run_session(config, reporters);
  // Fewer cases than the profile's lose a property some of its power (a
  // bug it finds in 1 of 100 cases): said once, after the counts.
  if (config.run.cases > 0) {
    RunConfig profile_only = config.run;
    profile_only.cases = 0;
    // The properties that ran, each once, in the order they ran.
    std::vector<std::string> fewer, seen;
    for (const PropertyOutcome& o : result.outcomes) {
      if (std::find(seen.begin(), seen.end(), o.property) != seen.end()) continue;
      seen.push_back(o.property);
      const int full = case_budget(*find_property(o.property), profile_only);
      if (config.run.cases < full) fewer.push_back(fmt::format("{} {}", o.property, full));
    }
    if (!fewer.empty()) {
      std::cout << fmt::format(
          "note: --cases {} is below the {} profile's cases for {} of the properties run ({}{}): "
          "a property can miss at fewer cases a bug it finds at its own number\n",
          config.run.cases, profile_name(config.run.profile), fewer.size(),
          fmt::join(fewer.begin(), fewer.begin() + std::min<size_t>(fewer.size(), 3), ", "),
          fewer.size() > 3 ? ", ..." : "");
    }
  }
  if (result.interrupted) return kExitInterrupted;
  // A fixture asked for and not saved is an output missing, as a report
  // that cannot be written is: exit 2, after the results and the reports.
  if (fixture_errors.any()) return kExitUsage;
  return result.failed() ? kExitFailed : kExitOk;
}


// Every subcommand's options, as CLI11 parses them into it.
struct CommandLine {
  std::vector<std::string> list_plugins, list_python;
  bool list_verbose = false;
  std::string describe_name;
  std::vector<std::string> describe_plugins, describe_python;
  bool describe_json = false;
  CheckOptions opt;
  CLI::Option* save_failures_opt = nullptr;
  ReplayOptions ropt;
  int64_t replay_timeout_ms = kDefaultCallTimeoutMs;
  double replay_baseline_factor = kDefaultBaselineFactor;
  CLI::Option* replay_timeout = nullptr;
  CLI::Option* replay_baseline = nullptr;
  std::string merge_out;
  std::vector<std::string> merge_in;
  bench::BenchOptions bench_opt;
  CLI::App* bench_cmd = nullptr;
  std::string oracle_path;
};

void add_list_and_describe(CLI::App& app, CommandLine& cl) {
  CLI::App* list = app.add_subcommand("list", "implementations (with kind) and properties");
  list->add_option("--plugin", cl.list_plugins,
                   "also list this plugin's implementations (repeatable)")->check(kNonEmpty);
  list->add_option("--python", cl.list_python,
                   "also list the implementations of this Python file, FILE.py[:NAME] "
                   "(repeatable)")->check(kNonEmpty);
  list->add_flag("--verbose,-v", cl.list_verbose,
                 "every declared field of each implementation (as describe)");

  CLI::App* describe = app.add_subcommand("describe", "every declared field of one implementation");
  describe->add_option("NAME", cl.describe_name, "implementation")->required()->check(kNonEmpty);
  describe->add_option("--plugin", cl.describe_plugins, "load this plugin first (repeatable)")
      ->check(kNonEmpty);
  describe->add_option("--python", cl.describe_python,
                       "load this Python file's implementations first, FILE.py[:NAME] "
                       "(repeatable)")->check(kNonEmpty);
  describe->add_flag("--json", cl.describe_json, "as the report's \"implementations\" entry");
}

void add_check(CLI::App& app, CommandLine& cl) {
  CLI::App* check = app.add_subcommand("check", "run the property suite");
  check->add_option("--impl", cl.opt.impls, "implementation to check (repeatable; default: every "
                                         "reference, adapter and layer implementation)")
      ->check(kNonEmpty);
  check->add_option("--plugin", cl.opt.plugins,
                    "shared library exporting attncheck_plugin_impls (repeatable); without "
                    "--impl, every implementation it exports is checked")
      ->check(kNonEmpty);
  check->add_option("--python", cl.opt.python,
                    "Python file declaring implementations with attncheck.implementation, "
                    "FILE.py[:NAME] (repeatable); without --impl, every one named (all the "
                    "file declares without :NAME) is checked")
      ->check(kNonEmpty);
  check->add_option("--property", cl.opt.properties, "property to run (repeatable; default: all)")
      ->check(kNonEmpty);
  check->add_option("--dtype", cl.opt.dtype,
                    "only this dtype: f64, f32, bf16, f16 (q = k/v = out), or a combination "
                    "q=F,kv=F,out=F such as q=bf16,kv=e4m3,out=bf16")
      ->check(kNonEmpty);
  check->add_option("--cases", cl.opt.cases,
                    fmt::format("cases per property, 1 to {} (default: the profile's)", kMaxCases))
      ->check(kCases);
  check->add_option("--seed", cl.opt.seed, "seed below 2^53 (default: ATTNCHECK_SEED, else fixed)")->check(kNonEmpty);
  check->add_option("--profile", cl.opt.profile, "ci (default) or thorough")->check(kNonEmpty);
  check->add_option("--shard", cl.opt.shard, "K/N: run the K-th of N shards")->check(kNonEmpty);
  check->add_flag("--strict", cl.opt.strict, "NaN at masked keys, not only large values");
  check->add_flag("--no-real-sizes", cl.opt.no_real_sizes,
                  "small problems only: skip the real-size phase (SPEC 3)");
  check->add_option("--timeout-ms", cl.opt.timeout_ms,
                    fmt::format("per-call limit of CPU time of an isolated implementation "
                                "(default {}; a call blocked for {} times as long in wall time "
                                "is stopped too)",
                                kDefaultCallTimeoutMs, kWallTimeoutFactor))
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  check->add_option("--memory-limit-mb", cl.opt.memory_limit_mb,
                    "memory an isolated implementation's worker may allocate, in MiB (default: "
                    "half of this machine's memory; 0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  check->add_option("--baseline-factor", cl.opt.baseline_factor,
                    "AsAccurateAsBaseline's F: an error up to F times the baseline's, plus T^L "
                    "(default 8; at least 1)")
      ->check(kBaselineFactor);
  check->add_option("--jobs,-j", cl.opt.jobs,
                    "processes to run the work list in (default: the CPUs this process may use, "
                    "at most one per --memory-limit-mb, else per 2 GiB, of available memory); "
                    "the output is the same for any N")
      ->check(CLI::Range(1, 1024));
  check->add_flag("--no-isolation", cl.opt.no_isolation,
                  "run implementations in this process (for a debugger; a crash then ends "
                  "the run)");
  check->add_option("--report", cl.opt.report, "write the JSON report here")->check(kNonEmpty);
  check->add_option("--junit", cl.opt.junit, "write a JUnit XML report here (for CI test reporters)")
      ->check(kNonEmpty);
  cl.save_failures_opt =
      check->add_option("--save-failures", cl.opt.save_failures,
                        "directory for failure fixtures (replayed by the next run)")
          ->check(kNonEmpty);
  check->add_flag("--statistics", cl.opt.statistics,
                  "print what each property's problems reached of its coverage targets");
  check->add_flag("--prune-fixed", cl.opt.prune_fixed,
                  "remove saved failures that now pass (default: moved to DIR/fixed/)");
}

void add_replay(CLI::App& app, CommandLine& cl) {
  CLI::App* replay = app.add_subcommand("replay", "judge saved fixtures' cases again");
  replay->add_option("FIXTURE", cl.ropt.paths, "fixture JSON files, or folders of them")
      ->required()
      ->check(kNonEmpty);
  replay->add_option("--impl", cl.ropt.impl, "implementation (default: the fixture's)")->check(kNonEmpty);
  replay->add_option("--plugin", cl.ropt.plugins,
                     "load this plugin; its implementation judges the case (default: the "
                     "fixture's implementation if it exports it, else its only one)")
      ->check(kNonEmpty);
  replay->add_option("--python", cl.ropt.python,
                     "load this Python file, FILE.py[:NAME]; as --plugin")
      ->check(kNonEmpty);
  cl.replay_timeout =
      replay->add_option("--timeout-ms", cl.replay_timeout_ms,
                         "per-call limit of CPU time, as for check (default: the fixture's)")
          ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  replay->add_option("--memory-limit-mb", cl.ropt.memory_limit_mb,
                     "memory the worker may allocate, in MiB, as for check")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cl.replay_baseline =
      replay->add_option("--baseline-factor", cl.replay_baseline_factor,
                         "AsAccurateAsBaseline's F, as for check (default: the fixture's)")
          ->check(kBaselineFactor);
  replay->add_flag("--no-isolation", cl.ropt.no_isolation, "run the implementation in this process");
  CLI::Option* replay_strict =
      replay->add_flag("--strict", cl.ropt.strict, "judge as check --strict (default: the fixture's)");
  replay->add_flag("--no-strict", cl.ropt.no_strict, "judge without --strict whatever the fixture says")
      ->excludes(replay_strict);
  replay->add_option("--profile", cl.ropt.profile, "ci or thorough (default: the fixture's)")
      ->check(kNonEmpty);
  replay->add_option("--cases", cl.ropt.cases,
                     fmt::format("as for check, 1 to {} (default: the fixture's)", kMaxCases))
      ->check(kCases);
  replay->add_option("--dtype", cl.ropt.dtype, "must be the fixture's dtype (or combination)")
      ->check(kNonEmpty);
}

void add_merge_bench_oracle(CLI::App& app, CommandLine& cl) {
  CLI::App* merge = app.add_subcommand("merge-reports", "join the --report files of shards");
  merge->add_option("OUT", cl.merge_out, "merged report")->required()->check(kNonEmpty);
  merge->add_option("IN", cl.merge_in, "reports to join")->required()->check(kNonEmpty);

  cl.bench_cmd = bench::add_bench_command(app, cl.bench_opt);

  CLI::App* oracle_cmd = app.add_subcommand("oracle", "exact results of a problem or fixture as JSON");
  oracle_cmd->add_option("FILE", cl.oracle_path, "problem or fixture JSON")->required()->check(kNonEmpty);
}

// An unknown subcommand, said on stderr: true when argv[1] is one.
bool unknown_subcommand(CLI::App& app, int argc, char** argv) {
  // CLI11 would say only that an argument "was not expected".
  if (argc >= 2 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::cerr << fmt::format("attncheck: unknown subcommand '{}' (expected one of {})\n",
                               printable(argv[1]), fmt::join(names, ", "));
      return true;
    }
  }
  return false;
}

// Runs the parsed subcommand; bad input is one line on stderr and exit 2.
int run_command(CLI::App& app, CommandLine& cl) {
  try {
    if (app.got_subcommand("list")) return list_command(cl.list_plugins, cl.list_python, cl.list_verbose);
    if (app.got_subcommand("describe")) {
      return describe_command(cl.describe_name, cl.describe_plugins, cl.describe_python, cl.describe_json);
    }
    if (app.got_subcommand("oracle")) return oracle_command(cl.oracle_path);
    if (app.got_subcommand("replay")) {
      if (cl.replay_timeout->count() > 0) cl.ropt.timeout_ms = cl.replay_timeout_ms;
      if (cl.replay_baseline->count() > 0) cl.ropt.baseline_factor = cl.replay_baseline_factor;
      return replay_command(cl.ropt);
    }
    if (app.got_subcommand("merge-reports")) return merge_command(cl.merge_out, cl.merge_in);
    if (app.got_subcommand(cl.bench_cmd)) {
      return bench::bench_command(cl.bench_opt);
    }
    cl.opt.save_failures_given = cl.save_failures_opt->count() > 0;
    return check_command(cl.opt);
  } catch (const InputError& e) {
    // One line, whatever the input put in it (a field's text, a plugin's).
    std::cerr << "attncheck: " << printable(e.what(), kMessageChars) << "\n";
    return kExitUsage;
  } catch (const Cancelled&) {
    std::cerr << "attncheck: interrupted\n";
    return kExitInterrupted;
  } catch (const std::exception& e) {
    std::cerr << "attncheck: internal error: " << printable(e.what(), kMessageChars) << "\n";
    return kExitUsage;
  }
}

}  // namespace

namespace attncheck::cli {

int run_cli(int argc, char** argv) {
  // From the start: a Ctrl-C while LibTorch or a plugin loads is exit 3 too.
  // SIGHUP (the terminal closed) and SIGUSR1/2 (whose default would end
  // the run with no report) end it as SIGINT does: exit 3, reports written.
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) {
    struct sigaction sa {};
    sa.sa_sigaction = on_interrupt;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
  // The LibTorch adapters (attncheck_torch.so) and any other built-in
  // module load when a command needs them (a name of theirs, the default
  // set, list): LibTorch takes seconds to start. One that cannot be
  // loaded is said, and the rest goes on.
  install_module_loader([](const std::string& problem) {
    std::cerr << "attncheck: warning: " << problem << "\n";
  });
  CLI::App app{"attncheck: property-based verification of attention implementations"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(version()));

  CommandLine cl;
  add_list_and_describe(app, cl);
  add_check(app, cl);
  add_replay(app, cl);
  add_merge_bench_oracle(app, cl);
  if (unknown_subcommand(app, argc, argv)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "attncheck: " << printable(e.what(), kMessageChars) << "\n";
    return kExitUsage;
  }
  return run_command(app, cl);
}

}  // namespace attncheck::cli
