#pragma once
// The comparisons of attncheck bench: a sweep of sequence lengths over
// series that differ in one thing only, and the presets (exercises 6, 8, 9
// and 10, the speed targets and a smoke test). Everything a reading names
// (its baseline, its targets) is preset data, not code in reading.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/dtype.h"

namespace attncheck::bench {

/// One series of a comparison: a subject with its own dtype and attention
/// options.
struct Series {
  std::string subject;  ///< implementation name, or kGruSubject
  std::string label;    ///< unique within its sweep
  DType dtype = DType::f32;
  bool layer = false;  ///< measured inside a layer of width heads * dk
  int64_t window_left = -1, window_right = -1;
  int64_t heads = 0, dk = 0;  ///< 0: the sweep's
};

/// What a comparison concludes from its points (reading.h).
enum class Reading {
  none,
  speedup,  ///< every series against the baseline: time ratio and peak memory
  window,   ///< the share of the T^2 scores formed and the growth in T
  heads,    ///< each subject's parameter count and time by number of heads
  gru,      ///< the first series (an attention layer) against the last (the GRU)
  targets,  ///< the sweep's targets
};

/// A speed target of the `targets` reading, checked at the sweep's
/// target_seq against its baseline.
struct Target {
  enum class Kind {
    no_slower,      ///< baseline time <= label's (wall and CPU), then label's GFLOP/s
    within,         ///< label's time <= factor x the baseline's (wall and CPU)
    linear_memory,  ///< label's peak memory grows linearly in T
    linear_band,    ///< label's CPU time and peak memory grow about linearly in T
  };
  Kind kind = Kind::no_slower;
  std::string label;    ///< the series the target is about
  double factor = 1;    ///< within: the allowed time ratio
  std::string missing;  ///< no_slower: the likely reason when the series has no point
};

/// One comparison: every series at every length.
struct Sweep {
  std::string name, title;
  std::vector<Series> series;
  std::vector<int64_t> seqs;
  int64_t batch = 1, heads = 8, dk = 64;
  bool causal = false;
  Reading reading = Reading::none;
  /// The label of the series the speedup and targets readings compare
  /// with; empty: none.
  std::string baseline;
  int64_t target_seq = 0;  ///< the length the targets are checked at
  std::vector<Target> targets;
};

/// The sweeps of preset `name`: loop-vs-batched, window, heads, gru,
/// targets or smoke. Throws InputError for any other name.
std::vector<Sweep> preset_sweeps(const std::string& name);

}  // namespace attncheck::bench
