// The JSON reporter: --report (SPEC 5.3's report format, formats/report).

#include <algorithm>

#include "formats/output_file.h"
#include "formats/report.h"
#include "attncheck/reporters.h"

namespace attncheck {

JsonReporter::JsonReporter(std::string path, std::string label, std::vector<ImplInfo> impls)
    : path_(std::move(path)), label_(std::move(label)), impls_(std::move(impls)) {
  check_output_path(path_, label_);
}

void JsonReporter::on_start(uint64_t seed, Profile profile, const Shard&) {
  seed_ = seed;
  profile_ = profile;
}

void JsonReporter::on_outcome(const PropertyOutcome& outcome) { outcomes_.push_back(outcome); }

void JsonReporter::on_finish(const SessionResult&) {
  // A shard checks some implementations only: the others are not its.
  std::vector<ImplInfo> checked;
  for (const ImplInfo& info : impls_) {
    const bool has_outcome = std::any_of(outcomes_.begin(), outcomes_.end(),
                                         [&](const PropertyOutcome& o) { return o.impl == info.name; });
    if (has_outcome) checked.push_back(info);
  }
  write_output_file(
      path_,
      report_json(outcomes_, seed_, std::string(profile_name(profile_)), checked).dump(2) + "\n",
      label_);
}

}  // namespace attncheck
