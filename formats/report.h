#pragma once
// The --report JSON of SPEC 5.2: its writer, and merge-reports' reader,
// which joins the reports of a run's shards.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/outcome.h"
#include "attncheck/registry.h"

namespace attncheck {

/// Every field `info` declares: {"name", "kind", "description", "origin"
/// (null for a built-in), "caught_by" (null unless broken), "dtypes" (names),
/// "combos" ([{"q", "kv", "out"}], empty = q = k/v = out per dtype),
/// "features" (names, core/features.h), "features_bits",
/// "empty_rows" ("error" or "zero"), "precision" {"accum", "p_cast",
/// "s_cast", "exp_ulps", "flush_to_zero", "ftz_formats" (names),
/// "key_block", and the stages of SPEC 4.1: "q_cast" (a format, "kv" or
/// null), "q_cast_kv", "score_accum", "softmax_accum", "pv_accum" (a
/// format or null: accum)}, "paths" [{"name", "precision" {as above}}]
/// (the dispatch paths, empty for one arithmetic), "limits" {...}}.
nlohmann::json implementation_json(const ImplInfo& info);

/// {"format": "attncheck-report-1", "attncheck", "seed", "profile",
/// "results", "implementations"}: the last holds implementation_json of
/// each of `impls` (the checked implementations' declarations).
nlohmann::json report_json(const std::vector<PropertyOutcome>& outcomes,
                           uint64_t seed, const std::string& profile,
                           const std::vector<ImplInfo>& impls = {});

/// Reads the reports at `paths` (at least one) and joins their results, in order, under
/// the first report's other fields; their implementations are joined too,
/// each name once. Every field of every report is checked first (SPEC 5.2;
/// docs/cli.md, "merge-reports"): the format, attncheck, a seed from 0 to
/// 2^53 - 1, the profile, shard, the implementations (objects with a string
/// name, each once), and each result's fields with their types and ranges
/// (a known status and kind, a dtype combination, counts >= 0, ...), no
/// unknown field, and an impl the report declares (when it declares any).
/// Throws InputError naming the file and the field at the first violation,
/// and when a report's seed or profile differs from the first's, a result
/// appears twice, or an implementation is declared otherwise than in an
/// earlier report.
nlohmann::json merge_reports(const std::vector<std::string>& paths);

/// The results of a report that fail a run: status "failed" or "xpass".
int failing_results(const nlohmann::json& report);

}  // namespace attncheck
