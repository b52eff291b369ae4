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

void JsonReporter::on_start(uint64_t seed, Profile profile, const Shard& shard) {
  seed_ = seed;
  profile_ = profile;
  shard_index_ = shard.index;
  shard_count_ = shard.count;
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
  nlohmann::json report = report_json(outcomes_, seed_, std::string(profile_name(profile_)), checked);
  // A shard's place in the whole list: merge-reports puts the results of
  // all N back in the order of one run.
  if (shard_count_ > 1) report["shard"] = {{"index", shard_index_}, {"count", shard_count_}};
  write_output_file(path_, report.dump(2) + "\n", label_);
}

}  // namespace attncheck
