// Judging one case (run/judge_once.h).

#include "run/judge_once.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"
#include "core/cancel.h"
#include "judge/causes.h"

namespace attncheck {

namespace {

Verdict judged(const PropertyDef& prop, CaseContext& ctx, const Case& c) {
  ctx.begin(c);
  try {
    prop.judge(ctx, c);
    return Verdict::pass();
  } catch (const CaseEnded& e) {
    return e.verdict;
  } catch (const Cancelled&) {
    throw;
  } catch (const InputError&) {
    throw;
  } catch (const nlohmann::json::exception&) {
    throw;
  } catch (const std::exception& e) {
    return ctx.record_failure(fmt::format("exception while judging: {}", e.what()));
  } catch (...) {
    return ctx.record_failure("a non-standard exception while judging");
  }
}

// "F1 (f16_pv_sum_overflow)".
std::string finding_name(const KnownFinding& f) {
  return fmt::format("{} ({})", f.finding, f.cause);
}

}  // namespace

Verdict judge_once(const PropertyDef& prop, CaseContext& ctx, const Case& c) {
  const Verdict v = judged(prop, ctx, c);
  if (!v.failed() || !ctx.keeps_calls()) return v;
  // The failure read against the known findings: explained when some call
  // offends and every offending call is explained by one of them.
  const std::vector<KnownFinding>& findings = ctx.config().known_findings;
  std::vector<std::string> causes;
  for (const KnownFinding& f : findings) causes.push_back(f.cause);
  bool any_explained = false, any_unexplained = v.died;
  size_t which = 0;
  std::vector<std::string> names;
  // A death has no output: a cause about deaths explains it by its signal.
  for (size_t k = 0; v.died && k < findings.size(); ++k) {
    if (!death_explained(findings[k].cause, v.signal)) continue;
    any_explained = true;
    any_unexplained = false;
    which = k;
    names.push_back(finding_name(findings[k]));
    break;
  }
  // Read twice at most: by SPEC 4's tolerances first; when no call offends
  // so, the failure is AsAccurateAsBaseline's beyond the first-order
  // analysis, and every inexact element of such a row is read.
  for (const bool beyond : {false, true}) {
    if (v.died) break;
    bool offends = false;
    for (const CaseContext::KeptCall& call : ctx.case_calls()) {
      const Problem& p = call.problem ? *call.problem : c.problem;
      const CallVerdict r = read_call(causes, p, call.result, ctx.info(), beyond);
      if (r.reading == CallReading::correct) continue;
      offends = true;
      if (r.reading == CallReading::unexplained) any_unexplained = true;
      if (r.reading != CallReading::explained) continue;
      if (!any_explained) which = r.cause;
      any_explained = true;
      const std::string n = finding_name(findings[r.cause]);
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    if (offends) break;
  }
  // A failure no call shows (the calls agree with the oracle, and the
  // property's own comparison failed) is no finding's.
  const bool explained = any_explained && !any_unexplained;
  if (ctx.seek == CaseContext::Seek::unexplained) {
    if (!explained) {
      ctx.pending_also_explained(std::move(names));
      ctx.commit_failure();
      return v;
    }
    std::optional<Case> kept = ctx.drop_failure();
    if (ctx.explained_failures++ == 0) {
      ctx.first_explained_case = std::move(kept);
      ctx.explained_finding = which;
      ctx.explained_at_size = ctx.at_real_size();
    }
    return Verdict::set_aside(v.message);
  }
  if (explained) {
    ctx.explained_finding = which;
    ctx.commit_failure();
    return v;
  }
  std::optional<Case> kept = ctx.drop_failure();
  if (!ctx.unexplained_set_aside) ctx.unexplained_set_aside = std::move(kept);
  return Verdict::set_aside(v.message);
}

}  // namespace attncheck
