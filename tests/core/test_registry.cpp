// The registry of implementations: built-ins present, names validated.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

TEST(Registry, IsNotEmptyAndHoldsTheFiveReferences) {
  const auto impls = registered_impls();
  ASSERT_FALSE(impls.empty()) << "no implementation registered: impls/ was not linked whole";
  for (const char* name : {"loop_f64", "loop_f32", "loop_zero_f64", "batched_f64", "batched_f32"}) {
    const auto impl = find_impl(name);
    ASSERT_NE(impl, nullptr) << name;
    EXPECT_EQ(impl->info().kind, Kind::reference);
  }
}

TEST(Registry, NamesAreValidAndDuplicatesRejected) {
  for (const auto& impl : registered_impls()) EXPECT_TRUE(valid_impl_name(impl->info().name));
  EXPECT_FALSE(valid_impl_name("Loop"));
  EXPECT_FALSE(valid_impl_name(""));
  EXPECT_FALSE(valid_impl_name("a b"));
  EXPECT_THROW(register_impl(find_impl("loop_f64")), std::invalid_argument);
}

}  // namespace
}  // namespace attncheck
