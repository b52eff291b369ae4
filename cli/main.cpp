// attncheck's entry point; the commands are in commands.cpp. The same
// program serves as the isolation's worker (host/isolation.h).

#include <malloc.h>

#include "host/isolation.h"
#include "commands.h"

int main(int argc, char** argv) {
  // Real-size problems are tens of megabytes, allocated and freed case
  // after case, in the harness and in its worker alike. glibc's defaults
  // serve such blocks with fresh mappings and hand freed heap tops back
  // to the kernel, so each case paid page faults again on memory just
  // freed: 40% of the CI profile's time on the paged built-ins. Kept in
  // the heap (at most 1 GiB of free memory, a bound far below the
  // worker's default limit), it is reused.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  if (const auto code = attncheck::worker_main(argc, argv)) return *code;
  return attncheck::cli::run_cli(argc, argv);
}
