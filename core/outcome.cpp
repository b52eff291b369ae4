#include "attncheck/outcome.h"

namespace attncheck {

std::string_view status_name(PropertyStatus s) {
  switch (s) {
    case PropertyStatus::passed: return "passed";
    case PropertyStatus::failed: return "failed";
    case PropertyStatus::xfail: return "xfail";
    case PropertyStatus::xpass: return "xpass";
    case PropertyStatus::skipped: return "skipped";
    case PropertyStatus::unsupported: return "unsupported";
    case PropertyStatus::not_run: return "not-run";
  }
  return "unknown";
}

}  // namespace attncheck
