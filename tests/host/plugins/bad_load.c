/* Plugins that misbehave while loading, each selected by a definition:
 *   LOAD_EXIT_IN_CONSTRUCTOR  exit(0) in a shared-object constructor (a
 *                             false pass, if the harness loaded it itself)
 *   LOAD_EXIT_IN_IMPLS        exit(0) in attncheck_plugin_impls
 *   LOAD_CRASH                a segmentation fault in attncheck_plugin_impls
 *   LOAD_HANG                 attncheck_plugin_impls never returns
 * The harness must answer each with exit 2 and one line naming the plugin. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <time.h>

#include "attncheck/plugin.h"

#if defined(LOAD_EXIT_IN_CONSTRUCTOR)
__attribute__((constructor)) static void leave(void) { exit(0); }
#endif

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = 0;
#if defined(LOAD_EXIT_IN_IMPLS)
  exit(0);
#elif defined(LOAD_CRASH)
  {
    volatile int* nowhere = NULL;
    *nowhere = 1;
  }
#elif defined(LOAD_HANG)
  {
    const struct timespec hour = {3600, 0};
    for (;;) nanosleep(&hour, NULL);
  }
#endif
  return NULL;
}
