#include "table.h"

#include <fmt/format.h>

namespace attncheck::bench {

std::string human_bytes(std::optional<int64_t> bytes) {
  if (!bytes) return "n/a";
  return fmt::format("{:.1f}", static_cast<double>(*bytes) / (1 << 20));
}

std::string time_text(double seconds) {
  if (seconds >= 1) return fmt::format("{:.3f} s", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

void print_group_header(const std::string& group) {
  fmt::print("{} (T {})\n", group, group == "short" ? "<= 256" : group == "medium" ? "257..1024" : "> 1024");
  fmt::print("  {:<34} {:>6} {:>11} {:>11} {:>11} {:>11} {:>9} {:>13} {:>8} {:>9}\n", "series", "T", "median",
             "min", "max", "median CPU", "peak MiB", "score elems", "GFLOP/s", "params");
}

void print_row(const Point& p) {
  const auto& r = p.result;
  if (r.status != "ok") {
    fmt::print("  {:<34} {:>6}  {}{}\n", p.spec.label, p.spec.seq, r.status, r.message.empty() ? "" : ": " + r.message);
    return;
  }
  const std::string elements = r.score_elements ? fmt::format("{}", *r.score_elements) : "n/a";
  const std::string params = r.parameters ? fmt::format("{}", *r.parameters) : "";
  fmt::print("  {:<34} {:>6} {:>11} {:>11} {:>11} {:>11} {:>9} {:>13} {:>8.2f} {:>9}\n", p.spec.label,
             p.spec.seq, time_text(r.median_s), time_text(r.min_s), time_text(r.max_s), time_text(r.median_cpu_s),
             human_bytes(r.peak_bytes), elements, r.flops / r.median_s / 1e9, params);
}

}  // namespace attncheck::bench
