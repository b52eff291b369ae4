#include "formats/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/features.h"
#include "formats/json.h"
#include "core/text.h"

namespace attncheck {
namespace {

// A precision as implementation_json spells it: the version 1 and 2
// traits, then the stages (SPEC 4.1), null where not declared (q_cast
// "kv": Q rounded to the call's K/V format).
nlohmann::json precision_json(const PrecisionTraits& pr) {
  const auto format_or_null = [](const std::optional<DType>& d) {
    return d ? nlohmann::json(dtype_name(*d)) : nlohmann::json();
  };
  return {{"accum", dtype_name(pr.accum)},
          {"p_cast", dtype_name(pr.p_cast)},
          {"s_cast", format_or_null(pr.s_cast)},
          {"exp_ulps", pr.exp_ulps},
          {"flush_to_zero", pr.flush_to_zero},
          {"ftz_formats", bit_names(pr.ftz_formats, ftz_format_table())},
          {"key_block", pr.key_block},
          {"q_cast", pr.q_cast_kv ? nlohmann::json("kv") : format_or_null(pr.q_cast)},
          {"q_cast_kv", pr.q_cast_kv},
          {"score_accum", format_or_null(pr.score_accum)},
          {"softmax_accum", format_or_null(pr.softmax_accum)},
          {"pv_accum", format_or_null(pr.pv_accum)}};
}

// Lines of text that may quote a plugin, as JSON strings (valid UTF-8).
nlohmann::json escaped_lines(const std::vector<std::string>& lines) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& line : lines) out.push_back(utf8_escaped(line));
  return out;
}

}  // namespace

nlohmann::json implementation_json(const ImplInfo& info) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType d : kAllDTypes)
    if (info.supports(d)) dtypes.push_back(dtype_name(d));
  nlohmann::json combos = nlohmann::json::array();
  for (const DTypeCombo& c : info.combos) {
    combos.push_back({{"q", dtype_name(c.q)}, {"kv", dtype_name(c.kv)}, {"out", dtype_name(c.out)}});
  }
  nlohmann::json paths = nlohmann::json::array();
  for (const ImplPath& path : info.paths) {
    paths.push_back({{"name", path.name}, {"precision", precision_json(path.precision)}});
  }
  const Limits& l = info.limits;
  // Foreign text (a plugin's path and the description made of it) is
  // escaped here, where it enters JSON: a Latin-1 file name must not make
  // the report unwritable (nlohmann's dump throws on invalid UTF-8).
  const auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(utf8_escaped(s));
  };
  return {{"name", utf8_escaped(info.name)},
          {"kind", kind_name(info.kind)},
          {"description", utf8_escaped(info.description)},
          {"origin", or_null(info.origin)},
          {"caught_by", or_null(info.caught_by)},
          {"dtypes", dtypes},
          {"combos", combos},
          {"features", feature_names(info.features)},
          {"features_bits", info.features},
          {"empty_rows", info.empty_rows == EmptyRowPolicy::zero ? "zero" : "error"},
          {"precision", precision_json(info.precision)},
          {"paths", paths},
          {"limits",
           {{"max_tq", l.max_tq},
            {"max_tk", l.max_tk},
            {"max_batch_heads", l.max_batch_heads},
            {"dk_min", l.dk_min},
            {"dk_max", l.dk_max},
            {"dk_multiple", l.dk_multiple},
            {"dv_equals_dk", l.dv_equals_dk}}}};
}

nlohmann::json report_json(const std::vector<PropertyOutcome>& outcomes,
                           uint64_t seed, const std::string& profile,
                           const std::vector<ImplInfo>& impls) {
  nlohmann::json results = nlohmann::json::array();
  for (const PropertyOutcome& o : outcomes) {
    nlohmann::json ce = nullptr;
    if (o.counterexample) {
      const auto& c = *o.counterexample;
      ce = {{"batch", c.batch}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
            {"tq", c.tq},       {"tk", c.tk},       {"dk", c.dk},
            {"dv", c.dv},       {"dtype", dtype_name(c.dtype)}};
    }
    // The real-size phase's shapes (SPEC 3), null where it did not run.
    nlohmann::json sizes = nullptr;
    if (o.real_sizes) {
      const RealSizeCounts& n = *o.real_sizes;
      sizes = {{"shapes", n.shapes},
               {"judged", n.judged},
               {"beyond_precision", n.beyond_precision},
               {"discarded", n.discarded},
               {"unsupported", n.unsupported}};
    }
    results.push_back({{"impl", utf8_escaped(o.impl)},
                       {"kind", kind_name(o.kind)},
                       // SPEC 5.2's spelling: "bf16", or q=F,kv=F,out=F.
                       {"dtype", combo_name(o.combo.value_or(DTypeCombo{o.dtype, o.dtype, o.dtype}))},
                       {"property", o.property},
                       {"status", status_name(o.status)},
                       {"cases", o.cases},
                       {"discarded", o.discarded},
                       {"max_budget_used", o.max_budget_used},
                       {"real_sizes", sizes},
                       // The messages quote plugins' text and paths.
                       {"message", utf8_escaped(o.message)},
                       {"diagnosis", escaped_lines(o.diagnosis)},
                       {"fixture", o.fixture ? nlohmann::json(utf8_escaped(*o.fixture)) : nlohmann::json()},
                       {"counterexample", ce}});
  }
  nlohmann::json implementations = nlohmann::json::array();
  for (const ImplInfo& info : impls) implementations.push_back(implementation_json(info));
  return {{"format", "attncheck-report-1"},
          {"attncheck", version()},
          {"seed", seed},
          {"profile", profile},
          {"results", results},
          {"implementations", implementations}};
}

nlohmann::json merge_reports(const std::vector<std::string>& paths) {
  nlohmann::json merged;
  // Which report each (implementation, dtype, property) came from: shards
  // of one run never share one, so a second is the same report given twice
  // (or overlapping shards), refused rather than counted twice.
  std::map<std::tuple<std::string, std::string, std::string>, std::string> seen_results;
  for (const std::string& path : paths) {
    // Within the size and nesting limits; errors are one line naming the file.
    const nlohmann::json j = read_json_file(path);
    // Types checked before any value() or get<>(), which would throw
    // nlohmann's type_error: an internal error, not the file's.
    if (!j.is_object() || !j.contains("format") || j["format"] != "attncheck-report-1") {
      throw InputError(path + ": field 'format': not an attncheck-report-1 report");
    }
    if (!j.contains("results") || !j["results"].is_array()) {
      throw InputError(path + ": field 'results': expected an array of results");
    }
    for (const auto& r : j["results"]) {
      if (!r.is_object() || (r.contains("status") && !r["status"].is_string())) {
        throw InputError(path + ": field 'results': every result must be an object whose "
                                "'status' is a string");
      }
    }
    // Optional: reports written before it have none.
    const bool has_impls = j.contains("implementations");
    if (has_impls) {
      const auto& impls = j["implementations"];
      const auto named = [](const nlohmann::json& i) {
        return i.is_object() && i.contains("name") && i["name"].is_string();
      };
      if (!impls.is_array() || !std::all_of(impls.begin(), impls.end(), named)) {
        throw InputError(path + ": field 'implementations': expected an array of objects "
                                "with a string 'name'");
      }
    }
    for (const auto& r : j["results"]) {
      const auto text = [&](const char* key) {
        return r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : std::string();
      };
      const auto key = std::make_tuple(text("impl"), text("dtype"), text("property"));
      if (const auto [it, added] = seen_results.emplace(key, path); !added) {
        throw InputError(fmt::format(
            "{}: the result of {} on {} ({}) is already in {}: the same report twice, or "
            "shards that overlap", path, std::get<2>(key), std::get<0>(key), std::get<1>(key),
            it->second));
      }
    }
    if (merged.is_null()) {
      merged = j;
      continue;
    }
    for (const char* key : {"seed", "profile"}) {
      if (j.value(key, nlohmann::json()) != merged.value(key, nlohmann::json())) {
        throw InputError(fmt::format("{}: field '{}' differs from the first report's", path, key));
      }
    }
    for (const auto& r : j["results"]) merged["results"].push_back(r);
    if (has_impls) {
      // Each name once: shards of one run declare the same implementations.
      nlohmann::json& joined = merged["implementations"];
      if (!joined.is_array()) joined = nlohmann::json::array();
      for (const auto& i : j["implementations"]) {
        const bool seen = std::any_of(joined.begin(), joined.end(), [&](const nlohmann::json& k) {
          return k["name"] == i["name"];
        });
        if (!seen) joined.push_back(i);
      }
    }
  }
  return merged;
}

int failing_results(const nlohmann::json& report) {
  int failed = 0;
  if (!report.contains("results")) return failed;
  for (const auto& r : report["results"]) {
    const std::string st = r.value("status", "");
    failed += st == "failed" || st == "xpass";
  }
  return failed;
}

}  // namespace attncheck
