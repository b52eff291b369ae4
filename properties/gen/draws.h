#pragma once
// The draw primitives the generators' files share (not for properties,
// which draw through problem() and RapidCheck's own generators): choices
// at full size, dims that grow with the case, small integers that shrink
// towards 0, one part of a problem as one RapidCheck ingredient, and the
// seed folding of the real-size draws.

#include <cstdint>
#include <utility>

#include <rapidcheck.h>

#include "properties/seeds.h"

namespace attncheck::gen::detail {

// RapidCheck scales inRange by the case's size, which grows from 0 over a
// run: right for dims (small problems first), wrong for choices among
// kinds, which must all occur at every size. `pick` draws at full size.

/// Integer index in [0, n), at any size, shrinking towards 0 (the simplest).
inline int64_t pick(int64_t n) {
  return *rc::gen::resize(100, rc::gen::inRange<int64_t>(0, n));
}

/// Integer index in [0, n), growing with the case's size (for dims).
inline int64_t grow(int64_t n) { return *rc::gen::inRange<int64_t>(0, n); }

/// A fair coin, shrinking towards false.
inline bool coin() { return *rc::gen::arbitrary<bool>(); }

/// An integer in [-n, n] that shrinks towards 0 through 1, -1, 2, -2, ...
/// (inRange alone shrinks towards its lower bound).
inline int small_int(int n) {
  const int k = *rc::gen::inRange(0, 2 * n + 1);
  return k % 2 ? (k + 1) / 2 : -(k / 2);
}

/// Mostly 1 (allowed), shrinking towards 1 so masks shrink to all-allowed.
inline uint8_t mostly_allowed() {
  return *rc::gen::resize(
      100, rc::gen::weightedElement<uint8_t>({{3, uint8_t{1}}, {1, uint8_t{0}}}));
}

/// One part of a problem as one RapidCheck ingredient. RapidCheck replays a
/// shrink by position in the sequence of draws; a part whose size depends on
/// earlier draws (a tensor of tq rows, a window's two bounds) would shift
/// every later draw when those shrink. As one ingredient each, parts keep
/// their positions, so shrinking tq leaves K and V as they were.
template <typename F>
auto part(F f) {
  return *rc::gen::exec(std::move(f));
}

/// A seed and an element's position folded through mix(): values that do
/// not move when a dim shrinks.
inline uint64_t fold(uint64_t x, uint64_t y) {
  x ^= y + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2);
  return mix(x);
}

/// fold of the seed with five coordinates in turn.
inline uint64_t hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  return fold(fold(fold(fold(fold(seed, a), b), c), d), e);
}

}  // namespace attncheck::gen::detail
