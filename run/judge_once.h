#pragma once
// Judging one case (properties/verdict.h): the one place the engine turns
// what a property's judge did into a Verdict. The RapidCheck driver, the
// real-size search, the shrink passes and replay all call it.

#include "attncheck/properties.h"
#include "properties/case_context.h"
#include "properties/verdict.h"

namespace attncheck {

/// Judges `c` once with `prop`'s judge, ctx.begin(c) first. The rule for
/// exceptions, the same for every caller:
/// - a verdict the judge ended the case with (CaseEnded) is that verdict;
/// - Cancelled (SIGINT / SIGTERM mid-call) propagates: the run is stopping,
///   and the session reports the property not-run;
/// - an InputError or a JSON error propagates: the case's args were not
///   what the property reads, which only a fixture can bring (replay turns
///   it into exit 2 naming the field);
/// - any other exception fails the case, recorded in ctx as every failure
///   is ("exception while judging: WHAT"): a defect the report must show,
///   and one the shrinker may shrink, as RapidCheck shrinks any failure.
/// With known findings (RunConfig::known_findings) a failure is then read
/// call by call (judge/causes.h: read_call): it is explained when some call
/// offends and a finding's cause explains every offending call. While ctx
/// seeks unexplained failures, an explained one is set aside (counted in
/// ctx.explained_failures, the first kept) and an unexplained one is
/// recorded, naming the findings that explain some of its calls; while it
/// seeks explained ones (to shrink one for xfail), the reverse, the first
/// unexplained one kept in ctx.unexplained_set_aside. Every caller (the
/// RapidCheck search and its shrinking, the size passes, the slice passes)
/// therefore shrinks only to the kind of failure it seeks.
Verdict judge_once(const PropertyDef& prop, CaseContext& ctx, const Case& c);

}  // namespace attncheck
