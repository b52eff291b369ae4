#pragma once
// The worker's side of isolation: a fresh execution of the program (or of a
// foreign language's worker command) that builds one implementation, or
// loads one file to describe what it declares, and answers the harness's
// requests until it closes the channel. Its entry point is worker_main of
// host/isolation.h.

namespace attncheck::host_detail {

/// True once this program has called worker_main: only then can the
/// harness spawn it as a worker.
bool program_calls_worker_main();

}  // namespace attncheck::host_detail
