#pragma once
// The seed arithmetic of the property runs, in one place: the per-property
// seeds derived from a run seed (run/driver.cpp), the real-size phase's
// case seeds and shapes (run/real_sizes.cpp, gen/real_size_shapes.cpp) and
// the seeded values at size (gen/draws.h, gen/real_size_draw.cpp).

#include <cstdint>
#include <string_view>

namespace attncheck {

/// SplitMix64's finaliser: decorrelates seeds derived from one another.
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// FNV-1a of a name (a property's, a test id).
inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace attncheck
