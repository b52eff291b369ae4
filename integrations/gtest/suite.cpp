#include <fmt/format.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "attncheck/fixture.h"
#include "attncheck/gtest.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "attncheck/registry.h"
#include "attncheck/session.h"
#include "run/config.h"

namespace attncheck {
namespace {

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
    // As a session runs an item: the known findings of this implementation
    // and property set aside while the search seeks another failure.
    RunConfig config = config_;
    config.known_findings = expected_->findings_for(impl_->info().name, prop_->name);
    PropertyOutcome o = run_property(*prop_, *impl_, dtype_, config);
    apply_expected_failures(*expected_, o);
    note_findings_gone(*expected_, *impl_, o);
    switch (o.status) {
      case PropertyStatus::passed:
        RecordProperty("max_budget_used", fmt::format("{:.3g}", o.max_budget_used));
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
  SessionConfig session;
  session.impls = {impl};
  // The options as `check`'s flags, and the environment's variables.
  RunFlags flags;
  if (options.seed) flags.seed = std::to_string(options.seed);
  flags.seed_option = "GTestSuiteOptions::seed";
  flags.profile = std::string(profile_name(options.profile));
  flags.cases = options.cases;
  flags.save_failures_dir = options.save_failures_dir;
  session.run = configure_run(flags, process_environment());
  const auto expected = std::make_shared<const ExpectedFailures>(
      options.expected_failures.empty() ? ExpectedFailures{}
                                        : load_expected_failures(options.expected_failures));
  const std::string suite = "attncheck_" + test_name_part(impl->info().name);
  // GoogleTest shards and filters the tests itself: the session's work list
  // is used whole, one test per item.
  for (const WorkItem& item : work_list(session)) {
    const std::string name = fmt::format("{}_{}", item.property->name, dtype_name(item.dtype));
    testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [item, config = session.run, expected]() -> testing::Test* {
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
