#pragma once
// The machine a bench ran on, for the report and the speed targets: the
// CPU's name and clock, and an estimate of its f32 FMA peak.

#include <string>

namespace attncheck::bench {

/// What /proc/cpuinfo (and cpufreq) say, and the peak estimated from it.
struct Machine {
  std::string cpu;  ///< model name
  double mhz = 0;   ///< cpuinfo_max_freq where cpufreq exposes it, else cpu MHz
  int lanes = 4;    ///< f32 lanes of the widest FMA vector
  bool fma = false;
  double peak_gflops = 0;       ///< f32 FMA peak of the threads used
  double avx2_peak_gflops = 0;  ///< the same with 8 lanes and FMA
  std::string how;              ///< the estimate's factors, in words
};

/// The f32 FMA peak of `threads` cores: cores x 2 FMA pipes (Zen 2-5 and
/// Intel's Haswell to Sapphire Rapids server cores have two) x lanes of the
/// widest vector the flags name x 2 flops per FMA x the clock. An estimate:
/// a VM's MHz is the host's nominal clock, and turbo or AVX-512 clock
/// offsets move it.
Machine machine(int threads);

}  // namespace attncheck::bench
