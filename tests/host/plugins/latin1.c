/* A plugin whose text is not clean UTF-8: its forward fails with a message
 * holding a Latin-1 byte (0xE9, "é" in Latin-1), a C1 control (U+0085) and
 * a right-to-left override (U+202E), and the test loads it from a file
 * named with a Latin-1 byte (caf\xE9.so). The reports must stay written
 * and valid UTF-8, the text escaped (tests/host/utf8_test.sh). */
#include <stdio.h>
#include <string.h>

#include "attncheck/plugin.h"

static int forward(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  (void)ctx;
  (void)p;
  snprintf(o->error, sizeof o->error, "%s", "caf\xe9 \xc2\x85 \xe2\x80\xae" "desrever");
  return ATTNCHECK_ERROR;
}

static attncheck_impl kImpl;

const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  memset(&kImpl, 0, sizeof kImpl);
  kImpl.abi_version = ATTNCHECK_ABI_VERSION;
  kImpl.name = "latin1_errors";
  kImpl.dtypes = 1u << ATTNCHECK_F64;
  kImpl.empty_rows = ATTNCHECK_EMPTY_ROW_ERROR;
  kImpl.precision.accum = ATTNCHECK_F64;
  kImpl.precision.p_cast = ATTNCHECK_F64;
  kImpl.precision.exp_ulps = 1;
  kImpl.forward = forward;
  kImpl.struct_size = sizeof kImpl;
  *count = 1;
  return &kImpl;
}
