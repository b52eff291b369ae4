#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "attncheck/fixture.h"
#include "attncheck/gtest.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "attncheck/registry.h"
#include "attncheck/session.h"
#include "core/text.h"
#include "run/config.h"
#include "run/saved_failures.h"

namespace attncheck {
namespace {

// This program's absolute path, as a printed reproduce line runs it.
std::string this_program() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("./TESTS") : exe.string();
}

// A test that fails with `message`: what a configuration error becomes
// (one line on stderr as well), so a bad variable is a failed test, never
// an abort before any test runs.
class FailingTest : public testing::Test {
 public:
  explicit FailingTest(std::string message) : message_(std::move(message)) {}
  void TestBody() override { FAIL() << message_; }

 private:
  std::string message_;
};

// Two test programs of one build registering an implementation of one
// name would give ctest two tests of each name. Each program claims its
// implementations' names in `dir` (a file per name holding the program's
// path) when it registers them; a name another program that still exists
// claimed is refused. Empty dir: no claim.
void claim_test_names(const std::string& impl, const std::string& dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path file = fs::path(dir) / (impl + ".program");
  const std::string me = this_program();
  if (std::ifstream in(file); in) {
    std::string owner;
    std::getline(in, owner);
    if (!owner.empty() && owner != me && fs::exists(owner, ec)) {
      throw InputError(fmt::format(
          "implementation '{}' is registered by two test programs of this build, {} and {}: "
          "their ctest names would be the same; register it in one, or rename one",
          impl, owner, me));
    }
  }
  std::ofstream(file) << me << "\n";
}

// GoogleTest filters split on '.' and treat '-' as negation.
std::string test_name_part(std::string s) {
  for (char& c : s)
    if (c == '.' || c == '-') c = '_';
  return s;
}

class PropertyTest : public testing::Test {
 public:
  PropertyTest(std::shared_ptr<const Implementation> impl, const PropertyInfo* prop, DType dtype,
               RunConfig config, std::shared_ptr<const ExpectedFailures> expected)
      : impl_(std::move(impl)),
        prop_(prop),
        dtype_(dtype),
        config_(std::move(config)),
        expected_(std::move(expected)) {}

  void TestBody() override {
    const Environment env = process_environment();
    if (const auto replay = env.find(kReplayVariable); replay != env.end() && !replay->second.empty()) {
      return replay_fixtures(replay->second);
    }
    // As a session runs an item: the known findings of this implementation
    // and property set aside while the search seeks another failure.
    RunConfig config = config_;
    config.known_findings = expected_->findings_for(impl_->info().name, prop_->name);
    // The failure database: this test's fixture an earlier run saved.
    std::optional<SavedReplay> saved;
    if (const auto file = find_saved_failure(*prop_, impl_->info().name, dtype_, config))
      saved = replay_saved_failure(*file, *impl_, config);
    PropertyOutcome o = run_property(*prop_, *impl_, dtype_, config);
    if (saved) {
      settle_saved_failure(*saved, o);
      fmt::print("attncheck: {}\n", saved_failures_summary({o}));
    }
    apply_expected_failures(*expected_, o);
    note_findings_gone(*expected_, *impl_, o);
    switch (o.status) {
      case PropertyStatus::passed:
        // What `check` prints for a pass, in the output and the XML.
        RecordProperty("cases", o.cases);
        RecordProperty("max_budget_used", fmt::format("{:.3g}", o.max_budget_used));
        RecordProperty("summary", o.message);
        fmt::print("attncheck: passed {} on {} ({}): {}\n", o.property, o.impl,
                   dtype_name(o.dtype), o.message);
        return;
      case PropertyStatus::skipped:
      case PropertyStatus::unsupported:
        GTEST_SKIP() << status_name(o.status) << ": " << o.message;
      case PropertyStatus::xfail:
        if (o.expected) {
          GTEST_SKIP() << "xfail: known finding " << o.expected->finding << " ("
                       << o.expected->cause << "): " << o.expected->reason << "\n"
                       << o.message;
        }
        GTEST_SKIP() << "xfail (" << expected_->path << "): " << o.message;
      default:
        FAIL() << o.message;
    }
  }

  // ATTNCHECK_REPLAY=FILE|DIR: the fixtures of this test's implementation,
  // property and output format judged again (as `attncheck replay`), in
  // place of the search; none of them: skipped, saying so.
  void replay_fixtures(const std::string& where) {
    std::vector<std::string> files;
    try {
      files = fixture_files({where});
    } catch (const InputError& e) {
      FAIL() << kReplayVariable << ": " << e.what();
    }
    int replayed = 0, failed = 0;
    for (const std::string& path : files) {
      try {
        const Fixture f = load_fixture(path);
        if (f.meta.impl.value_or("") != impl_->info().name ||
            f.meta.property.value_or("") != prop_->name || f.problem.dtype != dtype_) {
          continue;
        }
        ++replayed;
        const PropertyOutcome o = replay_fixture(f, *impl_, replay_config(f));
        if (o.status == PropertyStatus::failed) {
          ++failed;
          ADD_FAILURE() << path << " still fails:\n" << o.message;
        } else {
          fmt::print("attncheck: {} now {}\n", path, status_name(o.status));
        }
      } catch (const InputError& e) {
        ADD_FAILURE() << kReplayVariable << ": " << path << ": " << e.what();
        return;
      }
    }
    if (replayed == 0) {
      GTEST_SKIP() << kReplayVariable << ": no fixture of " << impl_->info().name << " "
                   << prop_->name << " (" << dtype_name(dtype_) << ") in " << where;
    }
    RecordProperty("replayed", replayed);
    fmt::print("attncheck: replayed {} fixture(s): {} still fail, {} now pass\n", replayed, failed,
               replayed - failed);
  }

 private:
  std::shared_ptr<const Implementation> impl_;
  const PropertyInfo* prop_;
  DType dtype_;
  RunConfig config_;
  std::shared_ptr<const ExpectedFailures> expected_;
};

}  // namespace

void add_gtest_suite(std::shared_ptr<const Implementation> impl, const GTestSuiteOptions& options) {
  if (!impl) throw std::invalid_argument("add_gtest_suite: null implementation");
  const std::string suite = "attncheck_" + test_name_part(impl->info().name);
  SessionConfig session;
  session.impls = {impl};
  std::shared_ptr<const ExpectedFailures> expected;
  try {
    // The options as `check`'s flags, the program's variables over them
    // (ATTNCHECK_SEED, ATTNCHECK_PROFILE, ATTNCHECK_TEST_CASES: a printed
    // reproduce line sets them), and the environment's.
    const Environment env = process_environment();
    RunFlags flags;
    if (options.seed) flags.seed = std::to_string(options.seed);
    flags.seed_option = "GTestSuiteOptions::seed";
    flags.profile = std::string(profile_name(options.profile));
    flags.cases = options.cases;
    // Absolute, so the printed fixture path and rerun line work from
    // anywhere (ctest runs the program in its build folder).
    if (!options.save_failures_dir.empty())
      flags.save_failures_dir = std::filesystem::absolute(options.save_failures_dir).string();
    session.run = configure_run(test_program_flags(flags, env), env);
    expected = std::make_shared<const ExpectedFailures>(
        options.expected_failures.empty() ? ExpectedFailures{}
                                          : load_expected_failures(options.expected_failures));
    claim_test_names(impl->info().name, options.names_dir);
  } catch (const InputError& e) {
    // One line, and a failed test in place of the suite: never an abort.
    const std::string message = fmt::format("attncheck: {}", e.what());
    fmt::print(stderr, "{}\n", message);
    testing::RegisterTest(suite.c_str(), "Configuration", nullptr, nullptr, __FILE__, __LINE__,
                          [message]() -> testing::Test* { return new FailingTest(message); });
    return;
  }
  const std::string program = this_program();
  // GoogleTest shards and filters the tests itself: the session's work list
  // is used whole, one test per item.
  for (const WorkItem& item : work_list(session)) {
    const std::string name = fmt::format("{}_{}", item.property->name, dtype_name(item.dtype));
    RunConfig config = session.run;
    config.test_program = fmt::format("{} --gtest_filter={}.{}", shell_word(program), suite, name);
    testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [item, config, expected]() -> testing::Test* {
                            return new PropertyTest(item.impl, item.property, item.dtype, config,
                                                    expected);
                          });
  }
}

void add_gtest_suites(const std::vector<std::string>& names, const GTestSuiteOptions& options) {
  if (names.empty()) {
    for (const auto& impl : default_impls()) add_gtest_suite(impl, options);
    return;
  }
  for (const std::string& name : names) {
    auto impl = find_impl(name);
    if (!impl)
      throw std::invalid_argument("add_gtest_suites: no implementation named '" + name + "'");
    add_gtest_suite(std::move(impl), options);
  }
}

}  // namespace attncheck
