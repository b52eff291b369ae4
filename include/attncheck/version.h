#pragma once
// The version of this build of attncheck.

namespace attncheck {

/// "0.1.0": the project version CMake configured.
const char* version();

}  // namespace attncheck
