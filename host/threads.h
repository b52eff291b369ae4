#pragma once
// How many threads an implementation may use inside one call. One unless a
// caller says otherwise (attncheck bench --threads): one thread keeps every
// call's summation order the same, so implementations can be held to
// Determinism, and keeps a test run off the other tests' cores.

namespace attncheck {

/// Threads an implementation may use inside one forward or backward call;
/// 1 unless set_impl_threads was called. Adapters of threaded libraries
/// (LibTorch's OpenMP pool) apply it before every call.
int impl_threads();

/// Sets impl_threads() for every later call; n < 1 is taken as 1.
void set_impl_threads(int n);

}  // namespace attncheck
