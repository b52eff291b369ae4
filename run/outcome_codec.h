#pragma once
// A PropertyOutcome as bytes, for `check --jobs` (run/parallel_session.h):
// a process of the run sends each outcome it found to the one that reports
// them. Both ends are the same binary, so doubles travel bit for bit; the
// codec's round trip is tested with every field set (tests/run/
// test_parallel_session.cpp).

#include <string>

#include "attncheck/outcome.h"

namespace attncheck {

std::string encode_outcome(const PropertyOutcome& o);

/// Throws std::runtime_error for bytes encode_outcome did not write.
PropertyOutcome decode_outcome(const std::string& bytes);

}  // namespace attncheck
