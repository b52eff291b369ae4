#include "attncheck/outcome.h"

#include <fmt/format.h>

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

std::string real_size_summary(const RealSizeCounts& c, bool beyond_judged,
                              std::string_view beyond_judge) {
  std::string parts;
  const auto add = [&](int n, const char* what) {
    if (n > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, what);
  };
  if (beyond_judged) {
    return fmt::format("{} shapes: {} judged{}{}{}", c.shapes, c.judged,
                       c.beyond_precision > 0
                           ? fmt::format(" ({} beyond the declared precision)", c.beyond_precision)
                           : "",
                       c.discarded > 0 ? fmt::format(", {} discarded", c.discarded) : "",
                       c.unsupported > 0 ? fmt::format(", {} unsupported", c.unsupported) : "");
  }
  add(c.beyond_precision, "beyond the declared precision");
  add(c.discarded, "discarded");
  add(c.unsupported, "unsupported");
  if (c.judged == 0 && c.shapes > 0) {
    return fmt::format("all {} shapes discarded ({}{})", c.shapes, parts,
                       c.beyond_precision > 0 && !beyond_judge.empty()
                           ? fmt::format("; those beyond the precision judged by {}", beyond_judge)
                           : "");
  }
  return fmt::format("{} shapes: {} judged{}{}", c.shapes, c.judged, parts.empty() ? "" : ", ",
                     parts);
}

}  // namespace attncheck
