#pragma once
// The child's side of attncheck bench: one point measured in a process of
// its own (spawn.h starts it), so neither another subject's allocations nor
// a library's threads touch the figures.

#include <string>

#include "plan.h"
#include "point.h"

namespace attncheck::bench {

/// Measures `s` in this process: generates the inputs from s.seed (for a
/// layer, the weights too, and the multi-head layer of attncheck/layer.h
/// around the subject unless it is a layer itself), runs s.warmup untimed
/// calls, releases freed heap pages (malloc_trim), reads the resident size,
/// resets the peak (VmHWM, by writing 5 to /proc/self/clear_refs), runs
/// s.repeats timed calls, and reports peak - before. The implementations
/// of s.plugins and s.python come from `load`. CPU time and memory are this
/// process's plus those of the processes it started (a Python subject's
/// worker, which makes each call: its CPU time per call, and its resident
/// size before and peak after, reset as this process's). Never throws for
/// the subject's own failures (they become the status); throws InputError
/// for an unknown subject.
PointResult measure_point(const PointSpec& s);

/// The child's entry: reads the spec from `spec_path`, applies the thread
/// count (impl_threads, Eigen, OpenBLAS), makes malloc serve large blocks
/// from the heap (freed buffers reused by the next call: the steady state
/// of a long-running caller, with no per-call page faults), measures and
/// writes the result as JSON to `result_path`. Returns the exit code.
int run_child(const std::string& spec_path, const std::string& result_path);

}  // namespace attncheck::bench
