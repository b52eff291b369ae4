#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

#include "attncheck/gtest.h"
#include "attncheck/properties.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

// GoogleTest filters split on '.' and treat '-' as negation.
std::string test_name_part(std::string s) {
  for (char& c : s)
    if (c == '.' || c == '-') c = '_';
  return s;
}

uint64_t seed_of(const GTestSuiteOptions& options) {
  if (options.seed) return options.seed;
  if (const char* env = std::getenv("ATTNCHECK_SEED"); env && *env) {
    return std::strtoull(env, nullptr, 10);
  }
  return kDefaultSeed;
}

class PropertyTest : public testing::Test {
 public:
  PropertyTest(std::shared_ptr<const Implementation> impl, const PropertyDef* prop, DType dtype,
               RunConfig config)
      : impl_(std::move(impl)), prop_(prop), dtype_(dtype), config_(std::move(config)) {}

  void TestBody() override {
    const PropertyOutcome o = run_property(*prop_, *impl_, dtype_, config_);
    switch (o.status) {
      case PropertyStatus::passed:
        RecordProperty("max_budget_used", fmt::format("{:.3g}", o.max_budget_used));
        return;
      case PropertyStatus::skipped:
      case PropertyStatus::unsupported:
        GTEST_SKIP() << status_name(o.status) << ": " << o.message;
      default:
        FAIL() << o.message;
    }
  }

 private:
  std::shared_ptr<const Implementation> impl_;
  const PropertyDef* prop_;
  DType dtype_;
  RunConfig config_;
};

}  // namespace

void add_gtest_suite(std::shared_ptr<const Implementation> impl, const GTestSuiteOptions& options) {
  if (!impl) throw std::invalid_argument("add_gtest_suite: null implementation");
  RunConfig config;
  config.seed = seed_of(options);
  config.profile = options.profile;
  config.cases = options.cases;
  config.save_failures_dir = options.save_failures_dir;
  const std::string suite = "attncheck_" + test_name_part(impl->info().name);
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    if (!impl->info().supports(d)) continue;
    for (const PropertyDef& prop : property_catalog()) {
      const std::string name = fmt::format("{}_{}", prop.name, dtype_name(d));
      testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [impl, p = &prop, d, config]() -> testing::Test* {
                              return new PropertyTest(impl, p, d, config);
                            });
    }
  }
}

void add_gtest_suites(const std::vector<std::string>& names, const GTestSuiteOptions& options) {
  if (names.empty()) {
    for (const auto& impl : registered_impls()) add_gtest_suite(impl, options);
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
