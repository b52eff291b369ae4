#pragma once
// The parent's side of a point: the child process that measures it
// (`attncheck bench --child SPEC --child-out RESULT`, measure.h), started
// with posix_spawn and waited for under a time limit.

#include <filesystem>

#include "point.h"

namespace attncheck::bench {

/// Runs `spec` in a child process of this executable (/proc/self/exe),
/// exchanging the spec and the result as point-INDEX.json and
/// point-INDEX.result.json in `dir`. The child's environment is this
/// process's with OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS
/// set to spec.threads (read before the libraries start their thread
/// pools). A child that cannot start, is killed by a signal or writes no
/// result gives status "error"; one still running after `timeout_s`
/// seconds is killed and gives "timeout".
PointResult run_in_child(const PointSpec& spec, const std::filesystem::path& dir, int index, double timeout_s);

}  // namespace attncheck::bench
