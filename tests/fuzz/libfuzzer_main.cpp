// libFuzzer's entry points for one target, chosen at compile time by
// ATTNCHECK_FUZZ_TARGET_NAME (tests/fuzz/fuzz.cmake builds one executable
// per target from this file).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fuzz_target.h"

#ifndef ATTNCHECK_FUZZ_TARGET_NAME
#error "ATTNCHECK_FUZZ_TARGET_NAME must name the target"
#endif

namespace {
const attncheck::fuzz::Target* target = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  target = attncheck::fuzz::find_target(ATTNCHECK_FUZZ_TARGET_NAME);
  if (!target) {
    std::fprintf(stderr, "no fuzz target named %s\n", ATTNCHECK_FUZZ_TARGET_NAME);
    std::exit(2);
  }
  target->init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  target->run(data, size);
  return 0;
}
