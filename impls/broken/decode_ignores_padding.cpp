// A decode path (one query against at least 256 keys, as a KV-cache kernel
// takes it) that never reads the key padding mask: padded keys of the cache
// get weight. The prefill path, taken otherwise, masks them.

#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr int64_t kDecodeMinKeys = 256;

bool decode_path(const Problem& p) { return p.tq == 1 && p.tk >= kDecodeMinKeys; }

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info(bugs::Twin::broken_decode_ignores_padding, "MatchesOracle"),
    [](const Problem& p) {
      // The front end's empty-row check still sees the padding (reject_empty).
      return naive_forward(p, p.scale, true, correct_softmax(),
                           [&p](int64_t b, int64_t h, int64_t i, int64_t j) {
                             return decode_path(p)
                                        ? allowed_except(p, Constraint::key_valid, b, h, i, j)
                                        : p.allowed(b, h, i, j);
                           });
    }));

}  // namespace
}  // namespace attncheck::impls::broken
