#pragma once
// One point of attncheck bench: a subject (an implementation, an attention
// layer around one, or the GRU) on one generated problem, what the child
// process measuring it reports, and their JSON (the parent and the child
// exchange both as files).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"

namespace attncheck::bench {

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
  std::vector<std::string> python;   ///< FILE.py[:NAME]: loaded in the child, run in a worker
  DType dtype = DType::f32;
  int64_t seq = 0, batch = 1, heads = 1, dk = 64;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  int repeats = 5, warmup = 1, threads = 1;
  uint64_t seed = 1;
  double timeout_s = 600;  ///< the point's limit (a Python worker's per-call CPU limit too)
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

/// A planned point with its outcome, and the comparison it belongs to.
struct Point {
  PointSpec spec;
  PointResult result;
  std::string sweep;
};

/// The spec as the child reads it (spec_from_json inverts it).
nlohmann::json to_json(const PointSpec& s);
/// Throws nlohmann::json's exceptions for a missing or mistyped field.
PointSpec spec_from_json(const nlohmann::json& j);
/// The result as the parent reads it (result_from_json inverts it).
nlohmann::json to_json(const PointResult& r);
/// Throws nlohmann::json's exceptions for a missing or mistyped field.
PointResult result_from_json(const nlohmann::json& j);

/// The key/query pairs a problem of `s` allows (B * H * the band of the
/// causal mask and window): the score elements an ideal kernel forms.
int64_t allowed_pairs(const PointSpec& s);

/// The band of a sequence length exercise 8 asks results to be grouped
/// by: "short" up to 256, "medium" up to 1024, "long" beyond.
std::string length_group(int64_t seq);

}  // namespace attncheck::bench
