#pragma once
// What `attncheck bench` was asked to do: the parsed command line, owned by
// the caller and passed to every step explicitly.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::bench {

/// The bench's options (bench.h's add_bench_command binds them to the
/// command line). An option a preset overrides only when given is optional.
struct BenchOptions {
  std::vector<std::string> impls;    ///< --impl: implementations to measure
  std::vector<std::string> plugins;  ///< --plugin: loaded in the parent and every child
  /// --python FILE.py[:NAME]: declared to the parent and every child by a
  /// Python worker, in which each call then runs (plan.h's ImplLoader).
  std::vector<std::string> python;
  std::optional<std::string> seq;    ///< --seq: comma-separated lengths
  std::string dtype = "f32";         ///< --dtype
  std::string report, plot;          ///< --report JSON and --plot SVG paths; empty: none
  std::string preset;                ///< --preset; empty: a custom comparison
  std::string window;                ///< --window LEFT,RIGHT; empty: none
  std::optional<int64_t> batch;      ///< --batch (default 1)
  int64_t heads = 8, dk = 64;        ///< --heads, --dk
  int repeats = 5, warmup = 1, threads = 1;
  uint64_t seed = 20260101;
  bool causal = false, layer = false, gru = false;
  double timeout_s = 600;  ///< --timeout: seconds one point may take
  /// --child SPEC and --child-out RESULT: this process measures one point
  /// for a parent bench (hidden options).
  std::string child_spec, child_out;
};

}  // namespace attncheck::bench
