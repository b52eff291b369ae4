#include "formats/report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/features.h"
#include "core/fields.h"
#include "formats/json.h"
#include "core/text.h"

namespace attncheck {
namespace {

// A plain value (core/fields.h's GenericValue) as implementation_json
// spells it: a format by its name, null where an optional one is unset.
template <typename T>
nlohmann::json plain_json(const T& x) {
  if constexpr (std::is_same_v<T, DType>) {
    return dtype_name(x);
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return x ? nlohmann::json(dtype_name(*x)) : nlohmann::json();
  } else {
    return x;
  }
}

// Every field of `fields` the JSON carries that is not in `by_hand`, by
// the walk, under its name.
template <typename Fields, typename S, size_t N>
void put_plain_fields(nlohmann::json& j, const Fields& fields, const S& x,
                      const std::array<std::string_view, N>& by_hand) {
  fields::walk(fields, x, [&](const fields::Field& f, const auto& m) {
    if constexpr (fields::GenericValue<std::remove_cvref_t<decltype(m)>>) {
      if (f.in(fields::kJson) && !fields::named(f.name, by_hand)) {
        j[std::string(f.name)] = plain_json(m);
      }
    }
  });
}

// A precision as implementation_json spells it: every trait and stage by
// the walk (SPEC 4.1: null where not declared), ftz_formats by its bits'
// names, q_cast "kv" for Q rounded to the call's K/V format.
constexpr std::array<std::string_view, 2> kPrecisionByHand{"ftz_formats", "q_cast"};
static_assert(fields::handled_by(fields::kPrecisionFields, fields::kJson, kPrecisionByHand),
              "a precision field describe --json carries is neither written here nor plain");
constexpr std::array<std::string_view, 0> kLimitsByHand{};
static_assert(fields::handled_by(fields::kLimitsFields, fields::kJson, kLimitsByHand),
              "a limit describe --json carries is not of a plain type");

// implementation_json lays a declaration out by hand: these fields.
constexpr std::array<std::string_view, 12> kInfoByHand{
    "name",   "kind",   "dtypes",      "features",  "empty_rows", "precision",
    "limits", "description", "caught_by", "origin", "combos",     "paths"};
static_assert(fields::handled_by(fields::kImplInfoFields, fields::kJson, kInfoByHand),
              "an ImplInfo field describe --json carries is not written here");

nlohmann::json precision_json(const PrecisionTraits& pr) {
  nlohmann::json j = nlohmann::json::object();
  put_plain_fields(j, fields::kPrecisionFields, pr, kPrecisionByHand);
  j["ftz_formats"] = bit_names(pr.ftz_formats, ftz_format_table());
  j["q_cast"] = pr.q_cast_kv ? nlohmann::json("kv") : plain_json(pr.q_cast);
  return j;
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
  nlohmann::json limits = nlohmann::json::object();
  put_plain_fields(limits, fields::kLimitsFields, info.limits, kLimitsByHand);
  // Foreign text (a plugin's path and the description made of it) is
  // escaped here, where it enters JSON: a Latin-1 file name must not make
  // the report unwritable (nlohmann's dump throws on invalid UTF-8).
  const auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(utf8_escaped(s));
  };
  nlohmann::json j = {{"name", utf8_escaped(info.name)},
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
          {"limits", limits}};
  // Every other field by the walk (threads).
  put_plain_fields(j, fields::kImplInfoFields, info, kInfoByHand);
  return j;
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
    // Known findings (docs/cli.md): the one that explains an xfail (or whose
    // fixture passes, for an xpass), and those that explain part of a
    // failure; absent otherwise.
    if (o.expected) {
      results.back()["expected"] = {{"cause", o.expected->cause},
                                    {"finding", utf8_escaped(o.expected->finding)},
                                    {"reason", utf8_escaped(o.expected->reason)},
                                    {"fixture", utf8_escaped(o.expected->fixture)}};
    }
    if (!o.also_explained.empty()) results.back()["also_explained"] = escaped_lines(o.also_explained);
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
  std::vector<nlohmann::json> reports;
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
      reports.push_back(j);
      continue;
    }
    for (const char* key : {"seed", "profile"}) {
      if (j.value(key, nlohmann::json()) != merged.value(key, nlohmann::json())) {
        throw InputError(fmt::format("{}: field '{}' differs from the first report's", path, key));
      }
    }
    for (const auto& r : j["results"]) merged["results"].push_back(r);
    reports.push_back(j);
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
  // Every shard of one run, each once (their "shard" fields say so): the
  // results go back in the order of the whole list, where item i is the
  // (i / N)-th result of shard i % N + 1, and the implementations in the
  // order they first appear there, so the merge is the single run's report.
  const size_t n = reports.size();
  std::vector<const nlohmann::json*> by_index(n, nullptr);
  bool whole_run = n > 1;
  for (const nlohmann::json& r : reports) {
    const nlohmann::json& s = r.value("shard", nlohmann::json());
    if (!s.is_object() || !s.value("count", nlohmann::json()).is_number_integer() ||
        !s.value("index", nlohmann::json()).is_number_integer() ||
        s["count"].get<int64_t>() != static_cast<int64_t>(n)) {
      whole_run = false;
      break;
    }
    const int64_t k = s["index"].get<int64_t>();
    if (k < 1 || k > static_cast<int64_t>(n) || by_index[k - 1]) {
      whole_run = false;
      break;
    }
    by_index[k - 1] = &r;
  }
  if (whole_run) {
    nlohmann::json results = nlohmann::json::array();
    std::vector<size_t> next(n, 0);
    for (size_t i = 0;; ++i) {
      const nlohmann::json& shard = (*by_index[i % n])["results"];
      if (next[i % n] >= shard.size()) break;
      results.push_back(shard[next[i % n]++]);
    }
    size_t total = 0;
    for (const nlohmann::json& r : reports) total += r["results"].size();
    if (results.size() == total) {
      merged["results"] = std::move(results);
      if (merged.contains("implementations")) {
        nlohmann::json impls = nlohmann::json::array();
        for (const auto& r : merged["results"]) {
          const auto named = [&](const nlohmann::json& i) { return i["name"] == r.value("impl", ""); };
          if (std::any_of(impls.begin(), impls.end(), named)) continue;
          for (const nlohmann::json& rep : reports) {
            const nlohmann::json& list = rep.value("implementations", nlohmann::json::array());
            const auto it = std::find_if(list.begin(), list.end(), named);
            if (it != list.end()) {
              impls.push_back(*it);
              break;
            }
          }
        }
        merged["implementations"] = std::move(impls);
      }
    }
  }
  merged.erase("shard");
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
