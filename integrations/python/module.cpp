// attncheck._core: the C++ side of the Python module (docs/python.md).
// The harness side runs the property checks in this process,
// releasing the GIL, against implementations that live in worker
// interpreters (python -m attncheck._worker); the worker side serves them
// (python_impl.cpp).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/cancel.h"
#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "formats/json.h"
#include "core/features.h"
#include "host/isolation.h"
#include "core/fields.h"
#include "host/impl_sources.h"
#include "attncheck/oracle.h"
#include "formats/output_file.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "formats/report.h"
#include "attncheck/session.h"
#include "attncheck/registry.h"
#include "run/config.h"
#include "run/parallel_session.h"
#include "run/saved_failures.h"
#include "problem_convert.h"
#include "python_impl.h"

namespace attncheck::python {
namespace {

// SIGINT while the harness runs without the GIL: Python's own handler
// would only set a flag nobody looks at until the run ends, so for its
// duration the harness's cancellation takes the signal (a waiting isolated
// call gives up at once), and KeyboardInterrupt is raised afterwards.
class InterruptScope {
 public:
  InterruptScope() {
    reset_cancel();
    struct sigaction sa {};
    // The sender is noted: a SIGINT from one of the run's own workers fails
    // that implementation's call instead (core/cancel.h).
    sa.sa_sigaction = [](int sig, siginfo_t* info, void*) {
      note_signal(sig, info ? info->si_pid : 0);
    };
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_);
  }
  ~InterruptScope() { ::sigaction(SIGINT, &old_, nullptr); }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction old_ {};
};

// Raises KeyboardInterrupt when the run was interrupted.
void raise_if_interrupted() {
  if (!cancel_requested()) return;
  reset_cancel();
  PyErr_SetNone(PyExc_KeyboardInterrupt);
  throw py::error_already_set();
}

py::object json_to_py(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

// SavedFailure::Result as Python spells it (Outcome.saved["result"]).
constexpr const char* kSavedResults[] = {"still fails", "known", "now passes", "unreadable"};

// The failure database's line (run/saved_failures.h) from the "saved"
// dicts of outcomes (Outcome.saved), as `check` prints it.
std::string saved_summary(const std::vector<py::dict>& saved) {
  std::vector<PropertyOutcome> outcomes;
  for (const py::dict& d : saved) {
    SavedFailure f;
    f.fixture = d["fixture"].cast<std::string>();
    f.note = d["note"].cast<std::string>();
    const std::string result = d["result"].cast<std::string>();
    for (int k = 0; k < 4; ++k)
      if (result == kSavedResults[k]) f.result = static_cast<SavedFailure::Result>(k);
    outcomes.emplace_back().saved = std::move(f);
  }
  return saved_failures_summary(outcomes);
}

py::dict outcome_to_py(const PropertyOutcome& o) {
  py::dict d;
  d["property"] = o.property;
  d["impl"] = o.impl;
  // The combination the run pinned (check(dtypes=["q=f32,kv=q8_0,out=f32"]))
  // by its name, as the text report and the fixture spell it.
  d["dtype"] = o.combo ? combo_name(*o.combo) : std::string(dtype_name(o.dtype));
  d["status"] = std::string(status_name(o.status));
  d["cases"] = o.cases;
  d["discarded"] = o.discarded;
  d["max_budget_used"] = o.max_budget_used;
  if (o.real_sizes) {
    const RealSizeCounts& n = *o.real_sizes;
    py::dict sizes;
    for (auto [k, v] : {std::pair{"shapes", n.shapes}, {"judged", n.judged},
                        {"beyond_precision", n.beyond_precision}, {"discarded", n.discarded},
                        {"unsupported", n.unsupported}}) {
      sizes[k] = v;
    }
    d["real_sizes"] = sizes;
  } else {
    d["real_sizes"] = py::none();
  }
  d["message"] = o.message;
  d["fixture"] = o.fixture ? py::object(py::str(*o.fixture)) : py::object(py::none());
  if (o.counterexample) {
    const CounterexampleShape& c = *o.counterexample;
    py::dict shape;
    shape["dtype"] = std::string(dtype_name(c.dtype));
    for (auto [k, v] : {std::pair{"batch", c.batch}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
                        {"tq", c.tq}, {"tk", c.tk}, {"dk", c.dk}, {"dv", c.dv}}) {
      shape[k] = v;
    }
    d["counterexample"] = shape;
  } else {
    d["counterexample"] = py::none();
  }
  d["diagnosis"] = o.diagnosis;
  // Known findings (docs/cli.md): the one an xfail (or xpass) is about.
  if (o.expected) {
    py::dict e;
    e["cause"] = o.expected->cause;
    e["finding"] = o.expected->finding;
    e["reason"] = o.expected->reason;
    e["fixture"] = o.expected->fixture;
    d["expected"] = e;
  } else {
    d["expected"] = py::none();
  }
  d["also_explained"] = o.also_explained;
  // The failure database (docs/cli.md): what this item's saved fixture gave.
  if (o.saved) {
    py::dict f;
    f["fixture"] = o.saved->fixture;
    f["result"] = kSavedResults[static_cast<int>(o.saved->result)];
    f["note"] = o.saved->note;
    d["saved"] = f;
  } else {
    d["saved"] = py::none();
  }
  return d;
}

// The run's configuration as `check` makes it (run/config.h): the call's
// arguments as its flags, over the environment's variables.
RunConfig run_config(uint64_t seed, const std::string& profile, int cases, bool strict,
                     const std::string& save_failures_dir, int64_t timeout_ms) {
  RunFlags flags;
  flags.seed = std::to_string(seed);
  flags.seed_option = "seed";
  flags.profile = profile;
  flags.profile_option.clear();
  flags.cases = cases;
  flags.strict = strict;
  flags.save_failures_dir = save_failures_dir;
  flags.timeout_ms = timeout_ms;
  return configure_run(flags, process_environment());
}

// One implementation a Python file declares, loaded by a worker (the
// harness never imports the file), and the outcomes of the checks run on
// it so far.
class Checker {
 public:
  Checker(const std::string& path, const std::string& name, WorkerCommand command,
          int64_t timeout_ms)
      : timeout_ms_(timeout_ms) {
    // The one loader of host/impl_sources.h, this interpreter serving the
    // file: it throws InputError when the file does not declare `name`.
    ImplSources sources;
    sources.python = {path + ":" + name};
    sources.timeout_ms = timeout_ms;
    sources.python_worker = std::move(command);
    sources.python_label.clear();
    ImplList impls;
    {
      py::gil_scoped_release release;
      impls = load_sources(sources);
    }
    impl_ = impls.at(0);
  }

  py::object declaration() const { return json_to_py(implementation_json(impl_->info())); }

  py::dict run(const std::string& property, const std::string& dtype, uint64_t seed,
               const std::string& profile, int cases, bool strict,
               const std::string& save_failures_dir, const std::string& expected_failures) {
    return run_many({property}, dtype, seed, profile, cases, strict, save_failures_dir,
                    expected_failures, 1)[0];
  }

  // The properties in one output format (or pinned combination), as one
  // session of `check`: in `jobs` forked processes when jobs > 1 (each with
  // its own worker interpreter), the outcomes in the properties' order.
  py::list run_many(const std::vector<std::string>& properties, const std::string& dtype,
                    uint64_t seed, const std::string& profile, int cases, bool strict,
                    const std::string& save_failures_dir, const std::string& expected_failures,
                    int jobs) {
    SessionConfig config;
    config.impls = {impl_};
    for (const std::string& name : properties) {
      const PropertyInfo* prop = find_property(name);
      if (!prop) throw InputError(fmt::format("unknown property '{}'", name));
      config.properties.push_back(prop);
    }
    if (jobs < 1) throw InputError(fmt::format("jobs: {} is not a number of processes (>= 1)", jobs));
    config.jobs = jobs;
    config.run = run_config(seed, profile, cases, strict, save_failures_dir, timeout_ms_);
    // A dtype, or a combination of formats (q=F,kv=F,out=F) the run pins
    // its inputs to, as `check --dtype COMBO` does.
    const DTypeCombo combo = parse_dtype_combo(dtype);
    config.dtype = combo.out;
    if (!(combo.q == combo.out && combo.kv == combo.out)) config.run.combo = combo;
    if (!expected_failures.empty()) config.expected_failures = load_expected_failures(expected_failures);
    // The isolated implementation keeps its hangs across these sessions:
    // the run's bound on hangs (docs/isolation.md) holds for the checker.
    std::vector<PropertyOutcome> found;
    {
      py::gil_scoped_release release;
      InterruptScope interrupt;
      found = run_session(config, {}).outcomes;
    }
    raise_if_interrupted();
    py::list out;
    for (PropertyOutcome& o : found) {
      out.append(outcome_to_py(o));
      outcomes_.push_back(std::move(o));
    }
    return out;
  }

  // As `attncheck replay`: the fixture's recorded options unless given.
  py::dict replay(const std::string& path, std::optional<bool> strict,
                  std::optional<std::string> profile, int cases) {
    const Fixture f = load_fixture(path);
    // The fixture's recorded options unless given (the one reading of a
    // fixture's meta, shared with `attncheck replay`); this checker's time
    // limit when it is not the default.
    ReplayOverrides overrides;
    overrides.strict = strict;
    overrides.profile = profile;
    overrides.cases = cases;
    if (timeout_ms_ != kDefaultCallTimeoutMs) overrides.timeout_ms = timeout_ms_;
    const RunConfig config = replay_config(f, overrides);
    PropertyOutcome o;
    {
      py::gil_scoped_release release;
      InterruptScope interrupt;
      try {
        o = replay_fixture(f, *impl_, config);
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: {}", path, e.what()));
      }
    }
    raise_if_interrupted();
    return outcome_to_py(o);
  }

  void write_report(const std::string& path, uint64_t seed, const std::string& profile) const {
    check_output_path(path, "report");
    write_output_file(path, report_json(outcomes_, seed, profile, {impl_->info()}).dump(2) + "\n",
                      "report");
  }

 private:
  int64_t timeout_ms_;
  std::shared_ptr<const Implementation> impl_;
  std::vector<PropertyOutcome> outcomes_;
};

}  // namespace
}  // namespace attncheck::python

PYBIND11_MODULE(_core, m) {
  using namespace attncheck;
  using namespace attncheck::python;
  m.doc() = "attncheck's C++ engine (use the attncheck package, not this module)";
  register_python_loader();
  static py::exception<InputError> input_error(m, "InputError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(input_error.ptr(), e.what());
    }
  });

  m.attr("version") = std::string(version());
  m.attr("default_seed") = kDefaultSeed;
  m.attr("default_timeout_ms") = kDefaultCallTimeoutMs;
  m.attr("expected_failures_path") = kExpectedFailuresPath;

  m.def("fixture_files", &fixture_files, py::arg("paths"));
  m.def("saved_failures_summary", &saved_summary, py::arg("saved"));
  m.def("worker_main", [](const std::vector<std::string>& args) {
    std::vector<std::string> all = {"python"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    return worker_main(static_cast<int>(all.size()), argv.data()).value_or(2);
  }, "Serves the harness as an isolated worker (attncheck._worker); does not return.");

  m.def("feature_bits", [] {
    py::dict d;
    for (const NamedBit& b : feature_table()) d[py::str(std::string(b.name))] = b.bit;
    return d;
  });
  m.def("properties", [] {
    std::vector<std::pair<std::string, std::string>> ps;
    for (const PropertyInfo& p : property_catalog()) ps.emplace_back(p.name, p.statement);
    return ps;
  });
  // A dtype or combination's parts (q, kv, out) in SPEC 5.2's spelling,
  // and its canonical name (the dtype alone when q = kv = out); ValueError
  // naming the text for anything else.
  m.def("parse_combo", [](const std::string& text) {
    const DTypeCombo c = parse_dtype_combo(text);
    return py::make_tuple(std::string(dtype_name(c.q)), std::string(dtype_name(c.kv)),
                          std::string(dtype_name(c.out)), combo_name(c));
  });
  m.def("resolve_seed", [](std::optional<std::string> given) {
    return configured_seed(given, "seed", process_environment());
  });

  m.def("problem_from_json", [](const std::string& text, const std::string& where) {
    const Fixture f = fixture_from_json(parse_json(text, where), where);
    return py::make_tuple(problem_to_py(f.problem), json_to_py(f.args),
                          json_to_py(fixture_meta_to_json(f.meta)));
  });
  m.def("load_fixture", [](const std::string& path) {
    const Fixture f = load_fixture(path);
    return py::make_tuple(problem_to_py(f.problem), json_to_py(f.args),
                          json_to_py(fixture_meta_to_json(f.meta)));
  });
  // The engine's own dict of a problem dict: validated, with the block
  // formats' bytes (attncheck.Problem's constructor).
  m.def("problem_round_trip", [](const py::dict& d) { return problem_to_py(problem_from_py(d)); });
  m.def("problem_to_json", [](const py::dict& d) {
    return problem_to_json(problem_from_py(d)).dump(1);
  });
  // The Problem fields the bridge carries (core/fields.h), and a problem
  // with each at its default: what tests/python/test_fields.py holds the
  // converters to, so a field added to the description and forgotten here
  // fails there.
  m.def("python_problem_fields", [] {
    std::vector<std::string> names;
    const Problem p;
    fields::for_each_problem_field(p, [&](const fields::Field& f, const auto&) {
      if (f.in(fields::kPython)) names.emplace_back(f.name);
    });
    return names;
  });
  // The same for a declaration: the PrecisionTraits and ImplInfo fields
  // the bridge carries (precision's stages; ImplInfo's paths, inside
  // precision), and a declaration as the harness reads it, in describe
  // --json's spelling.
  m.def("python_precision_fields", [] {
    std::vector<std::string> names;
    const PrecisionTraits t;
    fields::for_each_precision_field(t, [&](const fields::Field& f, const auto&) {
      if (f.in(fields::kPython)) names.emplace_back(f.name);
    });
    return names;
  });
  m.def("python_info_fields", [] {
    std::vector<std::string> names;
    const ImplInfo i;
    fields::for_each_impl_info_field(i, [&](const fields::Field& f, const auto&) {
      if (f.in(fields::kPython)) names.emplace_back(f.name);
    });
    return names;
  });
  m.def("declaration_json", [](const py::dict& d) {
    return json_to_py(implementation_json(info_from_py(d, "declaration")));
  });
  // The first component in which precision `tight` is tighter than
  // `loose` (core/precision.cpp), "" when none: the declaration refuses a
  // path tighter than its own precision, as the C ABI's loader does.
  m.def("tighter_component", [](const py::dict& loose, const py::dict& tight) {
    return tighter_component(precision_from_py(loose), precision_from_py(tight));
  });
  m.def("default_problem", [] { return problem_to_py(Problem::zeros(DType::f64, 1, 1, 1, 1, 1, 1, 1)); });
  m.def("oracle", [](const py::dict& d) {
    const Problem p = problem_from_py(d);
    OracleResult r;
    {
      py::gil_scoped_release release;
      r = oracle(p);
    }
    return oracle_to_py(p, r);
  });

  py::class_<Checker>(m, "Checker")
      .def(py::init([](const std::string& path, const std::string& name, const std::string& program,
                       const std::vector<std::string>& args, const std::vector<std::string>& env,
                       int64_t timeout_ms) {
             return std::make_unique<Checker>(path, name, WorkerCommand{program, args, env},
                                              timeout_ms);
           }),
           py::arg("path"), py::arg("name"), py::arg("program"), py::arg("args"), py::arg("env"),
           py::arg("timeout_ms"))
      .def("declaration", &Checker::declaration)
      .def("run", &Checker::run, py::arg("property"), py::arg("dtype"), py::arg("seed"),
           py::arg("profile"), py::arg("cases"), py::arg("strict"), py::arg("save_failures_dir"),
           py::arg("expected_failures"))
      .def("run_many", &Checker::run_many, py::arg("properties"), py::arg("dtype"),
           py::arg("seed"), py::arg("profile"), py::arg("cases"), py::arg("strict"),
           py::arg("save_failures_dir"), py::arg("expected_failures"), py::arg("jobs"))
      .def("default_jobs", [](const Checker&) { return default_jobs(kPlannedMemoryPerJobMb); })
      .def("replay", &Checker::replay, py::arg("path"), py::arg("strict"), py::arg("profile"),
           py::arg("cases"))
      .def("write_report", &Checker::write_report, py::arg("path"), py::arg("seed"),
           py::arg("profile"));
}
