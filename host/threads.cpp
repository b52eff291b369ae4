#include "host/threads.h"

#include <atomic>

namespace attncheck {
namespace {

std::atomic<int> threads{1};

}  // namespace

int impl_threads() { return threads.load(); }

void set_impl_threads(int n) { threads.store(n < 1 ? 1 : n); }

}  // namespace attncheck
