#pragma once
// What the generators drew, counted for the generator tests (SPEC 3's
// covering set: each regime and constraint kind actually occurs).

#include <cstdint>
#include <map>
#include <string>

namespace attncheck::gen {

/// What the generator drew: "regime X" per tensor, and per problem the
/// constraint kinds ("constraints none", "constraints key_padding", ...,
/// "constraints causal_top_left"), "bias", "softcap", "strided", "gqa",
/// "tq != tk", "tq = 1", "batch != heads".
struct Coverage {
  std::map<std::string, int64_t> counts;
  int64_t problems = 0;
  int64_t tensors = 0;
};

/// While alive, every problem drawn is counted into `c` (single-threaded:
/// one scope at a time).
class CoverageScope {
 public:
  explicit CoverageScope(Coverage& c);
  ~CoverageScope();
  CoverageScope(const CoverageScope&) = delete;
  CoverageScope& operator=(const CoverageScope&) = delete;
};

namespace detail {

/// The live scope's counts, or nullptr when no CoverageScope is alive.
Coverage* counting();

/// Counts one `what` into the live scope's counts, if any.
void count(const std::string& what);

}  // namespace detail
}  // namespace attncheck::gen
