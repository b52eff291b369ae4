// Every generator and every phase hands an implementation
// only problems inside its declared format combinations (SPEC 5.1). Correct
// twins of paged_online_f32 that declare fewer combinations than it does,
// and refuse anything else as a plugin's loader would: one with only fp8
// K/V (no {d, d, d} at all), one with only a mixed combination (q = kv =
// f16, out = f32), one with a single format. Each passes every property it
// declares (or is skipped with a reason); a stray f32/f32/f32 problem
// fails it. The harness's own screen (CaseContext::require_declared) would
// name such a problem a defect of attncheck, so either way a stray draw
// fails these tests.

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "impls/impl_common.h"

namespace attncheck {
namespace {

struct Twin {
  std::string name;
  std::vector<DTypeCombo> combos;
};

const std::vector<Twin>& twins() {
  static const std::vector<Twin> t = {
      {"fp8_only", {{DType::bf16, DType::e4m3, DType::bf16}, {DType::f32, DType::e4m3, DType::f32}}},
      {"mixed_only", {{DType::f16, DType::f16, DType::f32}}},
      {"single_format", {{DType::bf16, DType::bf16, DType::bf16}}},
  };
  return t;
}

// paged_online_f32 declaring only `twin`'s combinations; a problem outside
// them is an error of the call (the harness must never hand one over).
std::shared_ptr<const Implementation> make(const Twin& twin) {
  const auto kernel = find_impl("paged_online_f32");
  if (!kernel) throw std::runtime_error("paged_online_f32 is not registered");
  ImplInfo info = kernel->info();
  info.name = "paged_online_" + twin.name;
  info.combos = twin.combos;
  info.dtypes = 0;
  for (const DTypeCombo& c : info.combos)
    if (c.q == c.out && c.kv == c.out) info.dtypes |= dtype_bit(c.out);
  return std::make_shared<impls::FunctionImpl>(info, [info, kernel](const Problem& p) {
    const std::string part = undeclared_serving_part(info, p);
    if (!part.empty()) throw std::runtime_error("handed a problem with " + part);
    return kernel->forward(p);
  });
}

struct Case {
  size_t twin;
  std::string property;
  DType dtype;
  Profile profile;
};

std::vector<Case> cases(Profile profile) {
  std::vector<Case> v;
  for (size_t t = 0; t < twins().size(); ++t) {
    const auto impl = make(twins()[t]);
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      if (!impl->info().supports_output(d)) continue;
      for (const PropertyDef& p : property_defs()) v.push_back({t, p.name, d, profile});
    }
  }
  return v;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string s = twins()[info.param.twin].name + "_" +
                  std::string(dtype_name(info.param.dtype)) + "_" + info.param.property;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class DeclaredFormatsOnly : public testing::TestWithParam<Case> {};

TEST_P(DeclaredFormatsOnly, CorrectTwinPassesOrIsSkippedWithReason) {
  const Case& c = GetParam();
  const auto impl = make(twins()[c.twin]);
  RunConfig config;
  config.seed = kDefaultSeed;
  if (const char* seed = std::getenv("ATTNCHECK_SEED")) config.seed = std::stoull(seed);
  config.profile = c.profile;
  const PropertyOutcome o = run_property(*find_property(c.property), *impl, c.dtype, config);
  std::cout << status_name(o.status) << ": " << o.message.substr(0, 300) << "\n";
  ASSERT_TRUE(o.status == PropertyStatus::passed || o.status == PropertyStatus::skipped)
      << status_name(o.status) << "\n" << o.message;
  if (o.status == PropertyStatus::skipped) {
    EXPECT_FALSE(o.message.empty());
  } else {
    EXPECT_GT(o.cases, 0);
    EXPECT_LE(o.max_budget_used, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ci, DeclaredFormatsOnly, testing::ValuesIn(cases(Profile::ci)),
                         case_name);
// The thorough profile takes about 10 minutes for the three twins on two
// cores, beyond what CI affords: run by hand, a seed at a time, as the docs
// records (ATTNCHECK_THOROUGH=1 ATTNCHECK_SEED=1
// build/tests/test_declared_formats --gtest_filter='Thorough*'). Without
// the variable there are no such tests, so ctest lists none.
std::vector<Case> thorough_cases() {
  if (!std::getenv("ATTNCHECK_THOROUGH")) return {};
  return cases(Profile::thorough);
}
INSTANTIATE_TEST_SUITE_P(Thorough, DeclaredFormatsOnly, testing::ValuesIn(thorough_cases()),
                         case_name);

}  // namespace
}  // namespace attncheck
