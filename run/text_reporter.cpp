// The text reporter: the lines `attncheck check` prints.

#include <fmt/format.h>

#include "attncheck/reporters.h"
#include "attncheck/registry.h"
#include "run/saved_failures.h"

namespace attncheck {

void TextReporter::on_start(uint64_t seed, Profile profile, const Shard& shard) {
  out_ << fmt::format("attncheck {}: seed {}, profile {}{}\n", version(), seed,
                      profile_name(profile),
                      shard.count > 1 ? fmt::format(", shard {}/{}", shard.index, shard.count)
                                      : "");
}

void TextReporter::on_outcome(const PropertyOutcome& o) {
  // A failure's report is many lines: it goes below the outcome's line.
  const bool long_message = o.status == PropertyStatus::failed || o.status == PropertyStatus::xfail;
  out_ << fmt::format("{:<11} {:<24} {:<4} {:<28} {}\n", status_name(o.status), o.impl,
                      dtype_name(o.dtype), o.property, long_message ? "" : o.message);
  if (long_message) out_ << o.message << "\n";
  // Coverage (PropertyOutcome::coverage): a target a pass never reached
  // is said, since a bug that needs it went unseen.
  if (o.status == PropertyStatus::passed) {
    for (const CoverageTarget& t : o.coverage) {
      if (t.reached == 0 && t.drawn > 0) {
        out_ << fmt::format(
            "note: {} on {} ({}): none of the {} problems drawn had {}; a bug that needs it "
            "went unseen (more --cases, or the real-size phase)\n",
            o.property, o.impl, dtype_name(o.dtype), t.drawn, t.what);
      }
    }
  }
  if (statistics_ && !o.coverage.empty()) {
    std::string s;
    for (const CoverageTarget& t : o.coverage)
      s += fmt::format("{}{}: {} of {}", s.empty() ? "" : "; ", t.what, t.reached, t.drawn);
    out_ << "  statistics: " << s << "\n";
  }
  out_.flush();
}

void TextReporter::on_finish(const SessionResult& result) {
  if (const std::string saved = saved_failures_summary(result.outcomes); !saved.empty()) {
    out_ << saved << "\n";
  }
  for (const auto& [name, budget] : result.max_budget) {
    out_ << fmt::format("largest budget used by a passing case: {:<24} {:.3g}\n", name, budget);
  }
  out_ << fmt::format(
      "{} passed, {} failed, {} skipped, {} unsupported, {} xfail, {} xpass, {} not-run\n",
      result.count(PropertyStatus::passed), result.count(PropertyStatus::failed),
      result.count(PropertyStatus::skipped), result.count(PropertyStatus::unsupported),
      result.count(PropertyStatus::xfail), result.count(PropertyStatus::xpass),
      result.count(PropertyStatus::not_run));
}

}  // namespace attncheck
