#include "core/cancel.h"

#include <atomic>
#include <mutex>

namespace attncheck {
namespace {

// Lock-free, so setting it from a signal handler is safe.
std::atomic<bool> cancelled{false};
static_assert(std::atomic<bool>::is_always_lock_free);

// Signals noted by handlers and not yet resolved: a ring the handlers
// append to (claiming a slot by `noted`) and cancel_requested() drains.
// The sender check reads /proc, which a handler must not: it runs here,
// outside the handler.
constexpr unsigned kSlots = 16;
std::atomic<int> slot_sig[kSlots];
std::atomic<int> slot_sender[kSlots];
std::atomic<unsigned> noted{0};
std::atomic<unsigned> resolved{0};
std::atomic<SignalSenderCheck> sender_check{nullptr};
std::mutex resolve_mutex;

void resolve_noted() noexcept {
  std::lock_guard lock(resolve_mutex);
  while (resolved.load() != noted.load()) {
    const unsigned k = resolved.load() % kSlots;
    const int sig = slot_sig[k].load(std::memory_order_acquire);
    if (sig == 0) return;  // its handler is still writing it: next time
    const int sender = slot_sender[k].load();
    slot_sig[k].store(0);
    resolved.fetch_add(1);
    const SignalSenderCheck check = sender_check.load();
    bool from_worker = false;
    try {
      from_worker = check && sender > 0 && check(sig, sender);
    } catch (...) {
    }
    if (!from_worker) request_cancel();
  }
}

}  // namespace

void request_cancel() noexcept { cancelled.store(true, std::memory_order_relaxed); }

void note_signal(int sig, int sender) noexcept {
  const unsigned k = noted.load();
  // A full ring (16 signals unresolved) cancels: never lose a Ctrl-C.
  if (k - resolved.load() >= kSlots - 1 || sig == 0) {
    request_cancel();
    return;
  }
  const unsigned mine = noted.fetch_add(1);
  slot_sender[mine % kSlots].store(sender);
  slot_sig[mine % kSlots].store(sig, std::memory_order_release);
}

void set_signal_sender_check(SignalSenderCheck check) noexcept { sender_check.store(check); }

bool cancel_requested() noexcept {
  if (resolved.load() != noted.load()) resolve_noted();
  return cancelled.load(std::memory_order_relaxed);
}
void reset_cancel() noexcept { cancelled.store(false, std::memory_order_relaxed); }

}  // namespace attncheck
