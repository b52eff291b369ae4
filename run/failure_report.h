#pragma once
// The failure report of SPEC 2 (the shrunk problem, its diagnosis, the
// seed and the reproduce line) and the fixture it saves.

#include <string>

#include "attncheck/outcome.h"
#include "attncheck/properties.h"
#include "properties/case_context.h"

namespace attncheck {

/// How a failure's report says to reproduce it.
struct Reproduce {
  enum class Kind {
    none,       // replay of a fixture: nothing to print
    rc_params,  // a small case: RC_PARAMS with RapidCheck's reproduce map
    whole_run,  // the real-size phase: the seed replays the whole run
  } kind = Kind::none;
  std::string rc_params;  // for Kind::rc_params
};

/// Where an item's failure is saved: DIR/IMPL-DTYPE-PROPERTY.json (the
/// output format's name), one file per item, so a later run finds it.
std::string fixture_path(const std::string& dir, const std::string& impl, DType dtype,
                         const std::string& property);

/// Fills `out` as the failure of `prop` on `impl`: status failed, the
/// report (`found` is printed before the message: where a real-size search
/// found it), the diagnosis, and the fixture when the config saves them.
/// `passing` < 0: no "after N passing cases".
void report_failure(const PropertyDef& prop, const Implementation& impl, DType dtype,
                    const RunConfig& config, const CaseContext& ctx, const Reproduce& reproduce,
                    int passing, PropertyOutcome& out, const std::string& found = {});

}  // namespace attncheck
