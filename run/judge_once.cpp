// Judging one case (run/judge_once.h).

#include "run/judge_once.h"

#include <exception>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"
#include "core/cancel.h"

namespace attncheck {

Verdict judge_once(const PropertyDef& prop, CaseContext& ctx, const Case& c) {
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

}  // namespace attncheck
