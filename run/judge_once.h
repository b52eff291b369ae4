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
Verdict judge_once(const PropertyDef& prop, CaseContext& ctx, const Case& c);

}  // namespace attncheck
