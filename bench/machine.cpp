#include "machine.h"

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace attncheck::bench {

Machine machine(int threads) {
  Machine m;
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && m.cpu.empty()) m.cpu = value;
    if (key == "cpu MHz" && m.mhz == 0) m.mhz = std::atof(value.c_str());
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  std::ifstream max_freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (max_freq >> khz && khz > 0) m.mhz = khz / 1000;
  m.fma = flags.find(" fma ") != std::string::npos;
  const bool avx2 = flags.find(" avx2 ") != std::string::npos;
  m.lanes = flags.find(" avx512f ") != std::string::npos ? 16 : avx2 || flags.find(" avx ") != std::string::npos ? 8 : 4;
  const double per_cycle = 2.0 * m.lanes * (m.fma ? 2.0 : 1.0);
  m.peak_gflops = threads * per_cycle * m.mhz / 1000;
  m.avx2_peak_gflops = threads * 2.0 * 8 * 2 * m.mhz / 1000;
  m.how = fmt::format("{} thread(s) x 2 FMA pipes x {} f32 lanes ({}) x 2 flops x {:.0f} MHz", threads, m.lanes,
                      m.lanes == 16 ? "AVX-512" : m.lanes == 8 ? "AVX2" : "SSE", m.mhz);
  return m;
}

}  // namespace attncheck::bench
