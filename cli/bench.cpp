// attncheck bench: placeholder until the bench issue lands.

#include "bench.h"

#include <cstdio>

namespace attncheck::cli {

CLI::App* add_bench_command(CLI::App& app) {
  return app.add_subcommand("bench", "cost comparisons (not built yet)");
}

int bench_command() {
  std::fprintf(stderr, "attncheck: bench is not built yet\n");
  return 2;
}

}  // namespace attncheck::cli
