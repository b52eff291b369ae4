// The run's configuration (run/config.h): flags over the environment's
// variables, each bad value an InputError naming its flag or variable.

#include "run/config.h"

#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "attncheck/dtype.h"

namespace attncheck {
namespace {

std::string input_error(const RunFlags& flags, const Environment& env) {
  try {
    configure_run(flags, env);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ConfigureRun, DefaultsAreCheckDefaults) {
  const RunConfig c = configure_run({}, {});
  EXPECT_EQ(c.seed, kDefaultSeed);
  EXPECT_EQ(c.profile, Profile::ci);
  EXPECT_EQ(c.cases, 0);
  EXPECT_FALSE(c.strict);
  EXPECT_TRUE(c.real_sizes);
  EXPECT_EQ(c.timeout_ms, 0);  // the default limit is recorded as none
  EXPECT_EQ(c.save_failures_dir, "");
  EXPECT_EQ(c.property_options.baseline_factor, kDefaultBaselineFactor);
  EXPECT_FALSE(c.combo);
}

TEST(ConfigureRun, FlagsComeBeforeVariables) {
  const Environment env{{kSeedVariable, "7"}};
  EXPECT_EQ(configure_run({}, env).seed, 7u);
  RunFlags flags;
  flags.seed = "42";
  EXPECT_EQ(configure_run(flags, env).seed, 42u);
  // An empty variable is unset.
  EXPECT_EQ(configure_run({}, {{kSeedVariable, ""}}).seed, kDefaultSeed);
}

TEST(ConfigureRun, FlagsAreCarried) {
  RunFlags flags;
  flags.profile = "thorough";
  flags.cases = 5;
  flags.strict = true;
  flags.real_sizes = false;
  flags.timeout_ms = 1234;
  flags.save_failures_dir = "dir";
  flags.property_options.baseline_factor = 2;
  const RunConfig c = configure_run(flags, {});
  EXPECT_EQ(c.profile, Profile::thorough);
  EXPECT_EQ(c.cases, 5);
  EXPECT_TRUE(c.strict);
  EXPECT_FALSE(c.real_sizes);
  EXPECT_EQ(c.timeout_ms, 1234);
  EXPECT_EQ(c.save_failures_dir, "dir");
  EXPECT_EQ(c.property_options.baseline_factor, 2);
}

TEST(ConfigureRun, ABadValueNamesItsFlagOrVariable) {
  EXPECT_EQ(input_error({}, {{kSeedVariable, "abc"}}),
            "ATTNCHECK_SEED: 'abc' is not a seed (an integer below 2^53)");
  RunFlags flags;
  flags.seed = "-1";
  flags.seed_option = "GTestSuiteOptions::seed";
  EXPECT_EQ(input_error(flags, {}),
            "GTestSuiteOptions::seed: '-1' is not a seed (an integer below 2^53)");
  flags = {};
  flags.profile = "fast";
  EXPECT_EQ(input_error(flags, {}), "--profile: unknown profile 'fast' (expected ci or thorough)");
  flags.profile_option.clear();
  EXPECT_EQ(input_error(flags, {}), "unknown profile 'fast' (expected ci or thorough)");
  // The profile is read before the seed, as `check` always did.
  EXPECT_EQ(input_error(flags, {{kSeedVariable, "abc"}}),
            "unknown profile 'fast' (expected ci or thorough)");
}

TEST(ConfigureRun, RealSizesAreOffOnlyForZero) {
  EXPECT_TRUE(real_sizes_enabled(Environment{}));
  EXPECT_FALSE(real_sizes_enabled({{kRealSizesVariable, "0"}}));
  for (const char* on : {"", "1", "no", "00"}) {
    EXPECT_TRUE(real_sizes_enabled({{kRealSizesVariable, on}})) << on;
  }
}

}  // namespace
}  // namespace attncheck
