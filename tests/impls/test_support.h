#pragma once
// Helpers shared by the implementation tests (test_impls, test_impls_tiled).

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "attncheck/registry.h"

namespace attncheck::test_support {

/// The registered implementation of this name; throws when there is none.
inline std::shared_ptr<const Implementation> impl(const std::string& name) {
  auto found = find_impl(name);
  if (!found) throw std::runtime_error("not registered: " + name);
  return found;
}

/// Small exact values (multiples of 1/8 in [-2, 2]) from a fixed LCG, so the
/// cases are "random-ish" yet identical on every run and representable in
/// every dtype.
class Values {
 public:
  explicit Values(uint64_t seed) : state_(seed) {}
  double next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(static_cast<int64_t>((state_ >> 33) % 33) - 16) / 8.0;
  }

 private:
  uint64_t state_;
};

}  // namespace attncheck::test_support
