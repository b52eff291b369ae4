// attncheck's entry point; the commands are in commands.cpp. The same
// program serves as the isolation's worker (host/isolation.h).

#include "host/isolation.h"
#include "commands.h"

int main(int argc, char** argv) {
  if (const auto code = attncheck::worker_main(argc, argv)) return *code;
  return attncheck::cli::run_cli(argc, argv);
}
