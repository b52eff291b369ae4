#include "core/cancel.h"

#include <atomic>

namespace attncheck {
namespace {

// Lock-free, so setting it from a signal handler is safe.
std::atomic<bool> cancelled{false};
static_assert(std::atomic<bool>::is_always_lock_free);

}  // namespace

void request_cancel() noexcept { cancelled.store(true, std::memory_order_relaxed); }
bool cancel_requested() noexcept { return cancelled.load(std::memory_order_relaxed); }
void reset_cancel() noexcept { cancelled.store(false, std::memory_order_relaxed); }

}  // namespace attncheck
