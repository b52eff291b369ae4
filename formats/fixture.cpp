// The "attncheck-fixture-1" format (SPEC 5.3): a saved counterexample (the
// problem, the property's args, the expected values and where it came
// from), reader beside writer, and its file.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "attncheck/implementation.h"
#include "formats/json.h"
#include "core/text.h"
#include "formats/json_reader.h"
#include "formats/output_file.h"
#include "formats/pretty_json.h"
#include "formats/problem_json.h"

namespace attncheck {
namespace {

using nlohmann::json;
using formats::kProblemFormat;
using formats::Reader;

constexpr std::string_view kFixtureFormat = "attncheck-fixture-1";

// nlohmann writes a non-finite double as null, which would not read back;
// replace such numbers anywhere inside free-form args/expected/meta.
json sanitized(const json& j) {
  if (j.is_number_float()) return number_to_json(j.get<double>());
  if (j.is_array() || j.is_object()) {
    json out = j;
    for (auto& item : out) item = sanitized(item);
    return out;
  }
  return j;
}

// The meta fields attncheck writes (FixtureMeta), in no particular order:
// the JSON object sorts them.
constexpr std::string_view kMetaFields[] = {
    "property", "impl",  "dtype",      "seed",    "reproduce", "attncheck",      "strict",
    "profile",  "cases", "timeout_ms", "path",    "baseline_factor"};

// meta: where a fixture came from. The fields attncheck writes must have
// their types (replay reads them); others are kept, as provenance.
void check_meta(Reader& r, const json& meta) {
  if (!meta.is_object()) r.field_error("meta", "expected an object");
  for (const char* key : {"property", "impl", "dtype", "reproduce",
                          "attncheck", "path"}) {
    const auto it = meta.find(key);
    if (it != meta.end() && !it->is_string()) {
      r.field_error(fmt::format("meta.{}", key),
                    fmt::format("expected a string, got {}", json_brief(*it)));
    }
  }
  // The options the failing run had (run/failure_report.cpp); absent in
  // fixtures saved before they were recorded.
  if (const auto strict = meta.find("strict"); strict != meta.end() && !strict->is_boolean()) {
    r.field_error("meta.strict", fmt::format("expected true or false, got {}", json_brief(*strict)));
  }
  if (const auto profile = meta.find("profile");
      profile != meta.end() && (!profile->is_string() || (*profile != "ci" && *profile != "thorough"))) {
    r.field_error("meta.profile", fmt::format("expected \"ci\" or \"thorough\", got {}", json_brief(*profile)));
  }
  const auto positive_below = [&](const char* key, int64_t limit) {
    const auto it = meta.find(key);
    if (it == meta.end()) return;
    const bool ok = it->is_number_integer() && it->get<int64_t>() >= 1 && it->get<int64_t>() <= limit;
    if (!ok) {
      r.field_error(fmt::format("meta.{}", key),
                    fmt::format("expected an integer from 1 to {}, got {}", limit, json_brief(*it)));
    }
  };
  positive_below("cases", 100000);
  positive_below("timeout_ms", 86400000);
  const auto seed = meta.find("seed");
  const bool seed_ok =
      seed == meta.end() ||
      (seed->is_number_unsigned() &&
       seed->get<uint64_t>() < (uint64_t{1} << 53)) ||
      (seed->is_number_integer() && seed->get<int64_t>() >= 0 &&
       seed->get<int64_t>() < (int64_t{1} << 53));
  if (!seed_ok) {
    r.field_error("meta.seed", fmt::format("expected an integer below 2^53, "
                                           "got {}",
                                           json_brief(*seed)));
  }
  // A number of at least 1, as --baseline-factor takes (a replay given
  // --baseline-factor does not read it, but a file holding a wrong one is
  // a wrong file).
  if (const auto f = meta.find("baseline_factor");
      f != meta.end() && !(f->is_number() && std::isfinite(f->get<double>()) && f->get<double>() >= 1)) {
    r.field_error("meta.baseline_factor",
                  fmt::format("expected a number of at least 1, got {}", json_brief(*f)));
  }
  // The spelling SPEC 5.2 gives a combination (a name, or q=F,kv=F,out=F).
  if (const auto d = meta.find("dtype"); d != meta.end()) {
    try {
      parse_dtype_combo(d->get<std::string>());
    } catch (const InputError& e) {
      r.field_error("meta.dtype", e.what());
    }
  }
}

// The typed meta of a checked "meta" object.
FixtureMeta meta_of(const json& meta) {
  FixtureMeta m;
  const auto get = [&]<typename T>(std::string_view key, std::optional<T>& field) {
    if (const auto it = meta.find(key); it != meta.end()) field = it->get<T>();
  };
  get("property", m.property);
  get("impl", m.impl);
  get("dtype", m.dtype);
  get("reproduce", m.reproduce);
  get("attncheck", m.attncheck);
  get("strict", m.strict);
  get("profile", m.profile);
  get("path", m.path);
  get("cases", m.cases);
  get("timeout_ms", m.timeout_ms);
  get("baseline_factor", m.baseline_factor);
  // A checked seed is a non-negative integer, stored signed or not.
  if (const auto it = meta.find("seed"); it != meta.end()) {
    m.seed = it->is_number_unsigned() ? it->get<uint64_t>()
                                      : static_cast<uint64_t>(it->get<int64_t>());
  }
  for (const auto& [key, value] : meta.items()) {
    if (std::find(std::begin(kMetaFields), std::end(kMetaFields), key) == std::end(kMetaFields)) {
      m.other[key] = value;
    }
  }
  return m;
}

}  // namespace

json fixture_meta_to_json(const FixtureMeta& m) {
  json meta = m.other;
  const auto put = [&](const char* key, const auto& field) {
    if (field) meta[key] = *field;
  };
  put("property", m.property);
  put("impl", m.impl);
  put("dtype", m.dtype);
  put("seed", m.seed);
  put("reproduce", m.reproduce);
  put("attncheck", m.attncheck);
  put("strict", m.strict);
  put("profile", m.profile);
  put("cases", m.cases);
  put("timeout_ms", m.timeout_ms);
  put("path", m.path);
  put("baseline_factor", m.baseline_factor);
  return meta;
}

json fixture_to_json(const Fixture& f) {
  return json{{"format", std::string(kFixtureFormat)},
              {"problem", problem_to_json(f.problem)},
              {"args", sanitized(f.args)},
              {"expected", sanitized(f.expected)},
              {"meta", sanitized(fixture_meta_to_json(f.meta))}};
}

Fixture fixture_from_json(const json& j, const std::string& where) {
  Reader r(j, where);
  const std::string format = r.string("format", r.required("format"));
  Fixture f;
  if (format == kProblemFormat) {
    f.problem = problem_from_json(j, where);
    return f;
  }
  if (format != kFixtureFormat) {
    r.field_error("format",
                  fmt::format("expected \"{}\" or \"{}\", got \"{}\"",
                              kProblemFormat, kFixtureFormat, format));
  }
  f.problem = problem_from_json(r.required("problem"),
                                fmt::format("{}: problem", where));
  // args: what the property drew beyond the problem. Only its shape is
  // the format's; the property that reads them checks their values against
  // the problem before replaying (PropertyDef::validate_args).
  if (const json* v = r.optional("args")) {
    if (!v->is_object()) r.field_error("args", "expected an object");
    f.args = *v;
  }
  if (const json* v = r.optional("expected")) f.expected = *v;
  if (const json* v = r.optional("meta")) {
    check_meta(r, *v);
    f.meta = meta_of(*v);
  }
  r.reject_unknown_fields();
  return f;
}

Fixture load_fixture(const std::string& path) {
  // Its tensors packed (parse_json): a large problem's memory stays within
  // a small multiple of its data.
  return fixture_from_json(read_json_file(path, input_limits::kFileBytes, true), path);
}

std::vector<std::string> fixture_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw InputError(fmt::format("{}: no such file or folder", printable(path)));
    // Not a folder: a file, which load_fixture reads only if it is a
    // regular one (a FIFO, socket or device is refused, saying which).
    if (!fs::is_directory(st)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      std::error_code type_ec;
      if (e.path().extension() == ".json" && e.is_regular_file(type_ec)) found.push_back(e.path().string());
    }
    if (ec) throw InputError(fmt::format("{}: cannot read the folder: {}", printable(path), ec.message()));
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

void save_fixture(const std::string& path, const Fixture& f) {
  const std::filesystem::path file(path);
  std::error_code ec;
  if (file.has_parent_path()) {
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) {
      throw InputError(fmt::format("fixture: cannot write '{}': cannot create directory '{}': {}",
                                   printable(path), printable(file.parent_path().string()),
                                   ec.message()));
    }
  }
  // As a report: a FIFO, device or link where the fixture goes is refused,
  // never opened (a FIFO with no reader would stop the run).
  write_output_file(path, formats::pretty_json(fixture_to_json(f)) + "\n", "fixture");
}

}  // namespace attncheck
