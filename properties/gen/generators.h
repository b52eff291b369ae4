#pragma once
// Generators of whole problems within an implementation's declared features,
// dtypes and limits (SPEC section 3), for RapidCheck: one include for the
// properties and the tests. One concept per header, as RapidCheck's gen/:
// spec.h (what a problem may use), problem.h (the generator),
// empty_rows.h, layouts.h, real_size_shapes.h (the real-size model),
// coverage.h. The files' own internals (draws.h, value_regimes.h,
// dense.h, serving_plans.h, real_size_draw.h) are not included here.

#include "properties/gen/coverage.h"
#include "properties/gen/empty_rows.h"
#include "properties/gen/layouts.h"
#include "properties/gen/problem.h"
#include "properties/gen/real_size_shapes.h"
#include "properties/gen/spec.h"
