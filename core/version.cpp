#include "attncheck/registry.h"

namespace attncheck {

const char* version() { return ATTNCHECK_VERSION; }

}  // namespace attncheck
