#include "formats/report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attncheck/dtype.h"
#include "core/features.h"
#include "core/fields.h"
#include "formats/json.h"
#include "formats/json_reader.h"
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


// ---- merge-reports' reading: every field of every report checked, so that
// a status it does not know (or none) is never merged as "not failed".

constexpr std::string_view kStatuses[] = {"passed",  "failed",      "xfail",  "xpass",
                                          "skipped", "unsupported", "not-run"};
constexpr std::string_view kKinds[] = {"reference", "adapter", "layer", "broken", "plugin"};

// The required field `name`: one of `names`.
template <size_t N>
void check_one_of(formats::Reader& r, std::string_view name, const std::string_view (&names)[N]) {
  const std::string v = r.string(name, r.required(name));
  if (std::find(std::begin(names), std::end(names), v) == std::end(names)) {
    std::vector<std::string_view> all(std::begin(names), std::end(names));
    r.field_error(name, fmt::format("unknown value \"{}\" (expected one of {})", v, fmt::join(all, ", ")));
  }
}

// A count: an integer from `least` up.
int64_t check_count(formats::Reader& r, std::string_view name, const nlohmann::json& v,
                    int64_t least = 0) {
  if (!v.is_number_integer()) {
    r.field_error(name, fmt::format("expected an integer, got {}", json_brief(v)));
  }
  const int64_t n = r.integer(name, v);
  if (n < least) r.field_error(name, fmt::format("must be >= {}, got {}", least, n));
  return n;
}

// An array of strings.
void check_strings(formats::Reader& r, std::string_view name, const nlohmann::json& v) {
  if (!v.is_array()) r.field_error(name, fmt::format("expected an array of strings, got {}", json_type_name(v)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      r.field_error(name, fmt::format("element {}: expected a string, got {}", i, json_brief(v[i])));
    }
  }
}

// An object of the given count fields (each required, >= `least`), no other.
void check_counts_object(formats::Reader& r, std::string_view name, const nlohmann::json& v,
                         std::initializer_list<std::string_view> fields, int64_t least) {
  formats::Reader in(v, fmt::format("{}: field '{}'", r.where(), name));
  for (std::string_view f : fields) check_count(in, f, in.required(f), least);
  in.reject_unknown_fields();
}

// One entry of "results", as report_json writes it; `declared` holds the
// report's implementations' names, or is null when the report has none
// (written before the field existed).
void check_result(const nlohmann::json& res, const std::string& where,
                  const std::set<std::string>* declared) {
  formats::Reader r(res, where);
  const std::string impl = r.string("impl", r.required("impl"));
  if (declared && !declared->count(impl)) {
    r.field_error("impl", fmt::format("'{}' is not one of the report's implementations", impl));
  }
  check_one_of(r, "kind", kKinds);
  const std::string dtype = r.string("dtype", r.required("dtype"));
  try {
    parse_dtype_combo(dtype);
  } catch (const InputError& e) {
    r.field_error("dtype", e.what());
  }
  if (r.string("property", r.required("property")).empty()) r.field_error("property", "is empty");
  check_one_of(r, "status", kStatuses);
  check_count(r, "cases", r.required("cases"));
  check_count(r, "discarded", r.required("discarded"));
  // Null where the budget was not finite (nlohmann writes inf as null).
  if (const nlohmann::json* v = r.optional("max_budget_used"); v && !(v->is_number() && v->get<double>() >= 0)) {
    r.field_error("max_budget_used", fmt::format("expected a number >= 0, got {}", json_brief(*v)));
  }
  if (const nlohmann::json* v = r.optional("real_sizes")) {
    check_counts_object(r, "real_sizes", *v, {"shapes", "judged", "beyond_precision", "discarded", "unsupported"}, 0);
  }
  r.string("message", r.required("message"));
  check_strings(r, "diagnosis", r.required("diagnosis"));
  if (const nlohmann::json* v = r.optional("fixture")) r.string("fixture", *v);
  if (const nlohmann::json* v = r.optional("counterexample")) {
    formats::Reader ce(*v, fmt::format("{}: field 'counterexample'", where));
    for (std::string_view f : {"batch", "heads", "kv_heads", "tq", "tk", "dk", "dv"}) {
      check_count(ce, f, ce.required(f), 1);
    }
    const std::string d = ce.string("dtype", ce.required("dtype"));
    try {
      parse_dtype(d);
    } catch (const std::exception&) {
      ce.field_error("dtype", fmt::format("unknown dtype \"{}\"", d));
    }
    ce.reject_unknown_fields();
  }
  if (const nlohmann::json* v = r.optional("expected")) {
    formats::Reader e(*v, fmt::format("{}: field 'expected'", where));
    for (std::string_view f : {"cause", "finding", "reason", "fixture"}) e.string(f, e.required(f));
    e.reject_unknown_fields();
  }
  if (const nlohmann::json* v = r.optional("also_explained")) check_strings(r, "also_explained", *v);
  r.reject_unknown_fields();
}

// Every field of the report at `path` (SPEC 5.2), each result's included;
// throws InputError naming the file and the first field that is wrong.
void check_report(const nlohmann::json& j, const std::string& path) {
  // The format first: a file that is no report is said to be none.
  if (!j.is_object() || !j.contains("format") || j["format"] != "attncheck-report-1") {
    throw InputError(path + ": field 'format': not an attncheck-report-1 report");
  }
  formats::Reader r(j, path);
  r.required("format");
  const nlohmann::json& results = r.required("results");
  if (!results.is_array()) r.field_error("results", "expected an array of results");
  r.string("attncheck", r.required("attncheck"));
  const nlohmann::json& seed = r.required("seed");
  if (!seed.is_number_integer() || check_count(r, "seed", seed) >= (int64_t{1} << 53)) {
    r.field_error("seed", fmt::format("expected an integer from 0 to 2^53 - 1, got {}", json_brief(seed)));
  }
  const std::string profile = r.string("profile", r.required("profile"));
  if (profile != "ci" && profile != "thorough") {
    r.field_error("profile", fmt::format("expected \"ci\" or \"thorough\", got \"{}\"", profile));
  }
  if (const nlohmann::json* v = r.optional("shard")) {
    check_counts_object(r, "shard", *v, {"index", "count"}, 1);
    if ((*v)["index"].get<int64_t>() > (*v)["count"].get<int64_t>()) {
      r.field_error("shard", "index is larger than count");
    }
  }
  std::optional<std::set<std::string>> declared;
  if (const nlohmann::json* v = r.optional("implementations")) {
    const auto named = [](const nlohmann::json& i) {
      return i.is_object() && i.contains("name") && i["name"].is_string();
    };
    if (!v->is_array() || !std::all_of(v->begin(), v->end(), named)) {
      r.field_error("implementations", "expected an array of objects with a string 'name'");
    }
    declared.emplace();
    for (const auto& i : *v) {
      if (!declared->insert(i["name"].get<std::string>()).second) {
        r.field_error("implementations", fmt::format("'{}' is declared twice", i["name"].get<std::string>()));
      }
    }
  }
  r.reject_unknown_fields();
  for (size_t i = 0; i < results.size(); ++i) {
    check_result(results[i], fmt::format("{}: results[{}]", path, i), declared ? &*declared : nullptr);
  }
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
  std::map<std::string, std::string> declared_by;  // implementation -> the report first declaring it
  for (const std::string& path : paths) {
    // Within the size and nesting limits; errors are one line naming the file.
    const nlohmann::json j = read_json_file(path);
    // Every field checked before any is read (value() or get<>() would
    // throw nlohmann's type_error, an internal error, not the file's).
    check_report(j, path);
    const bool has_impls = j.contains("implementations");
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
      if (has_impls) {
        for (const auto& i : j["implementations"]) declared_by[i["name"].get<std::string>()] = path;
      }
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
        const auto it = std::find_if(joined.begin(), joined.end(), [&](const nlohmann::json& k) {
          return k["name"] == i["name"];
        });
        if (it == joined.end()) {
          joined.push_back(i);
          declared_by[i["name"].get<std::string>()] = path;
        } else if (*it != i) {
          // Shards of one run declare each implementation alike: another
          // declaration is another build or another plugin.
          throw InputError(fmt::format("{}: field 'implementations': '{}' is declared otherwise "
                                       "than in {}",
                                       path, i["name"].get<std::string>(),
                                       declared_by[i["name"].get<std::string>()]));
        }
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
