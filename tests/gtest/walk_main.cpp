// The GoogleTest glue as a user's test program runs it (the main
// attncheck_add_tests generates, with a broken twin planted among the
// implementations): tests/gtest/walk_test.sh runs its printed reproduce
// and rerun lines. WALK_NAMES_DIR: where it claims its implementations'
// names (GTestSuiteOptions::names_dir).
#include <gtest/gtest.h>

#include <cstdlib>

#include "attncheck/gtest.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  attncheck::GTestSuiteOptions options;
  options.cases = 20;
  options.save_failures_dir = "walk-failures";
  options.expected_failures.clear();
  if (const char* dir = std::getenv("WALK_NAMES_DIR")) options.names_dir = dir;
  attncheck::add_gtest_suites({"loop_f64", "broken_unscaled"}, options);
  return RUN_ALL_TESTS();
}
