#pragma once
// One measurement of attncheck bench: a subject (an implementation, an
// attention layer around one, or the GRU) on one generated problem, timed
// over repeats after warm-up runs, with its peak resident memory. Runs in a
// child process of its own (bench.cpp starts it), so neither another
// subject's allocations nor a library's threads touch the figures.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"

namespace attncheck::cli {

/// The subject name of the bench's GRU layer (exercise 8's comparison; not
/// an attention implementation, so never in the registry).
inline constexpr const char* kGruSubject = "gru";

/// What one child measures.
struct PointSpec {
  std::string subject;  ///< implementation name, or kGruSubject
  std::string label;    ///< the series it belongs to in tables and the plot
  /// Run as a layer of width heads * dk: X W_q, X W_k, X W_v, the subject
  /// as attention core, the heads merged, times W_o (a registered `layer`
  /// implementation runs its own Layer::run).
  bool layer = false;
  std::vector<std::string> plugins;  ///< loaded in the child
  DType dtype = DType::f32;
  int64_t seq = 0, batch = 1, heads = 1, dk = 64;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  int repeats = 5, warmup = 1, threads = 1;
  uint64_t seed = 1;
};

/// What one child reports.
struct PointResult {
  std::string status = "ok";  ///< ok, unsupported, error or timeout
  std::string message;
  std::vector<double> times_s;  ///< wall time of each timed repeat
  double median_s = 0, min_s = 0, max_s = 0;
  /// CPU time of the process (all its threads) per repeat, and its median:
  /// on a machine shared with other work, wall time includes the waits for
  /// a core, CPU time does not.
  std::vector<double> cpu_s;
  double median_cpu_s = 0;
  std::optional<int64_t> peak_bytes;
  std::string peak_method;  ///< clear_refs, or hwm_since_start where VmHWM cannot be reset
  std::optional<int64_t> score_elements;  ///< counted by the implementation
  std::optional<int64_t> parameters;      ///< layers and the GRU
  double flops = 0;                       ///< useful floating-point operations of one call
  int64_t gru_hidden = 0;                 ///< the GRU's hidden size
};

nlohmann::json to_json(const PointSpec& s);
PointSpec spec_from_json(const nlohmann::json& j);
nlohmann::json to_json(const PointResult& r);
PointResult result_from_json(const nlohmann::json& j);

/// The key/query pairs a problem of `s` allows (B * H * the band of the
/// causal mask and window): the score elements an ideal kernel forms.
int64_t allowed_pairs(const PointSpec& s);

/// Measures `s` in this process: generates the inputs from s.seed, runs
/// s.warmup untimed calls, releases freed heap pages (malloc_trim), reads
/// the resident size, resets the peak (VmHWM, by writing 5 to
/// /proc/self/clear_refs), runs s.repeats timed calls, and reports
/// peak - before. Never throws for the subject's own failures (they become
/// the status); throws InputError for an unknown subject.
PointResult measure_point(const PointSpec& s);

/// The child's entry: reads the spec from `spec_path`, applies the thread
/// count (impl_threads, Eigen, OpenBLAS), makes malloc serve large blocks
/// from the heap (freed buffers reused by the next call: the steady state
/// of a long-running caller, with no per-call page faults), measures and
/// writes the result as JSON to `result_path`. Returns the exit code.
int run_child(const std::string& spec_path, const std::string& result_path);

}  // namespace attncheck::cli
