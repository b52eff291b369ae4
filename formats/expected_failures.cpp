#include "attncheck/fixture.h"

#include <fnmatch.h>
#include <sys/stat.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"
#include "core/bugs.h"
#include "formats/json.h"

namespace attncheck {
namespace {

// The CPU features an entry's "unless_cpu_has" and "if_cpu_has" may name,
// asked of this machine at run time (__builtin_cpu_supports takes literals
// only). They are the ones a kernel's dispatch is known to turn on:
// LibTorch 1.13 hands bf16 products to oneDNN only with AVX512BW, VL and DQ
// (mkldnn_bf16_device_check), and its oneDNN 2.6.3 runs them on AMX's tiles
// where the CPU has amx_bf16 (LibTorch-3). Off x86 every feature reads as
// absent.
struct CpuFeature {
  std::string_view name;
  bool present;
};

#if defined(__x86_64__) || defined(__i386__)
// AMX as a program can use it: CPUID.(7,0):EDX bit 24 (tiles) or 22 (bf16
// products), and the OS enables the tile state in XCR0 (bits 17 and 18;
// Linux 5.16 and later, which then lets a process use it on request,
// arch_prctl ARCH_REQ_XCOMP_PERM, as oneDNN asks). GCC 12's
// __builtin_cpu_supports knows no AMX name, so CPUID is read directly.
bool amx_usable(unsigned edx_bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << edx_bit))) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  return (lo & kTileState) == kTileState;
}
#endif

const std::vector<CpuFeature>& cpu_features() {
  static const std::vector<CpuFeature> features = [] {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return std::vector<CpuFeature>{
        {"avx2", __builtin_cpu_supports("avx2") != 0},
        {"fma", __builtin_cpu_supports("fma") != 0},
        {"avx512f", __builtin_cpu_supports("avx512f") != 0},
        {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
        {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
        {"avx512dq", __builtin_cpu_supports("avx512dq") != 0},
        {"amx_tile", amx_usable(24)},
        {"amx_bf16", amx_usable(24) && amx_usable(22)},
    };
#else
    return std::vector<CpuFeature>{{"avx2", false},     {"fma", false},      {"avx512f", false},
                                   {"avx512bw", false}, {"avx512vl", false}, {"avx512dq", false},
                                   {"amx_tile", false}, {"amx_bf16", false}};
#endif
  }();
  return features;
}

std::string known_cpu_features() {
  std::string s;
  for (const CpuFeature& f : cpu_features()) s += fmt::format("{}{}", s.empty() ? "" : ", ", f.name);
  return s;
}

// Whether this CPU has every feature the entry's field `key` names.
bool has_all_features(const nlohmann::json& e, const char* key, const std::string& path,
                      size_t index) {
  const nlohmann::json& names = e[key];
  const std::string where = fmt::format("{}: entry {}: field '{}'", path, index, key);
  if (!names.is_array() || names.empty())
    throw InputError(where + ": expected a non-empty array of CPU feature names");
  bool has_all = true;
  for (const nlohmann::json& n : names) {
    const CpuFeature* found = nullptr;
    for (const CpuFeature& f : cpu_features())
      if (n.is_string() && n.get<std::string>() == f.name) found = &f;
    if (!found) {
      throw InputError(fmt::format("{}: unknown CPU feature {} (known: {})", where, json_brief(n),
                                   known_cpu_features()));
    }
    has_all = has_all && found->present;
  }
  return has_all;
}

// Whether an entry holds on this machine, where a kernel takes the path the
// finding is about: always, or with "unless_cpu_has" when the CPU lacks one
// of the features named, with "if_cpu_has" when it has all of them (both:
// both conditions).
bool holds_here(const nlohmann::json& e, const std::string& path, size_t index) {
  bool holds = true;
  if (e.contains("unless_cpu_has")) holds = !has_all_features(e, "unless_cpu_has", path, index);
  if (e.contains("if_cpu_has")) holds = has_all_features(e, "if_cpu_has", path, index) && holds;
  return holds;
}

// An entry's string field, or InputError naming it.
std::string string_field(const nlohmann::json& e, const char* key, const std::string& where,
                         bool non_empty = true) {
  if (!e.contains(key) || !e[key].is_string() || (non_empty && e[key].get<std::string>().empty())) {
    throw InputError(fmt::format("{}: field '{}': expected a{} string", where, key,
                                 non_empty ? " non-empty" : ""));
  }
  return e[key].get<std::string>();
}

// The finding's fixture, relative to the list's own folder (as an include
// is to its file, so the list reads the same from any working directory);
// a readable regular file (a FIFO or a folder is refused, never opened).
std::string fixture_path(const std::string& given, const std::string& list,
                         const std::string& where) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(given).is_relative() ? fs::path(list).parent_path() / given
                                                    : fs::path(given);
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p.string();
  throw InputError(fmt::format("{}: field 'fixture': '{}' is not a readable regular file", where,
                               p.string()));
}

ExpectedFinding finding_entry(const nlohmann::json& e, const std::string& path,
                              const std::string& where) {
  ExpectedFinding f;
  const nlohmann::json& impl = e["impl"];
  if (impl.is_string() && !impl.get<std::string>().empty()) {
    f.impls.push_back(impl.get<std::string>());
  } else if (impl.is_array() && !impl.empty()) {
    for (const nlohmann::json& n : impl) {
      if (!n.is_string() || n.get<std::string>().empty())
        throw InputError(where + ": field 'impl': expected names or globs (strings)");
      f.impls.push_back(n.get<std::string>());
    }
  } else {
    throw InputError(where + ": field 'impl': expected a name, a glob or an array of them");
  }
  if (e.contains("property")) f.property = string_field(e, "property", where);
  f.finding.cause = string_field(e, "cause", where);
  if (!bugs::find_bug_class(f.finding.cause)) {
    std::string known;
    for (const bugs::BugClass& b : bugs::bug_classes())
      known += fmt::format("{}{}", known.empty() ? "" : ", ", b.name);
    throw InputError(fmt::format("{}: field 'cause': unknown bug class '{}' (known: {})", where,
                                 f.finding.cause, known));
  }
  f.finding.finding = string_field(e, "finding", where);
  f.finding.reason = string_field(e, "reason", where);
  f.finding.fixture = fixture_path(string_field(e, "fixture", where), path, where);
  return f;
}

}  // namespace

bool ExpectedFinding::names(const std::string& impl) const {
  return std::any_of(impls.begin(), impls.end(), [&](const std::string& g) {
    return fnmatch(g.c_str(), impl.c_str(), 0) == 0;
  });
}

bool ExpectedFinding::applies(const std::string& impl, const std::string& prop) const {
  return names(impl) && (!property || *property == prop);
}

std::vector<KnownFinding> ExpectedFailures::findings_for(const std::string& impl,
                                                         const std::string& property) const {
  std::vector<KnownFinding> out;
  for (const ExpectedFinding& f : findings)
    if (f.applies(impl, property)) out.push_back(f.finding);
  return out;
}

ExpectedFailures load_expected_failures(const std::string& path) {
  ExpectedFailures out;
  out.path = path;
  // No file: nothing expected to fail. Anything else at the path is read
  // (and refused unless a regular file) without being opened first.
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return out;
  const nlohmann::json j = read_json_file(path);  // size and nesting limits
  const nlohmann::json& list = j.is_object() ? j.value("expected_failures", nlohmann::json()) : j;
  if (!list.is_array()) throw InputError(path + ": expected an array of {impl, property, reason}");
  static const std::set<std::string> by_property{"impl", "property", "reason", "unless_cpu_has",
                                                 "if_cpu_has"};
  static const std::set<std::string> by_cause{"impl",    "property", "cause",          "finding",
                                              "reason",  "fixture",  "unless_cpu_has", "if_cpu_has"};
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    const std::string where = fmt::format("{}: entry {}", path, i);
    if (!e.is_object() || !e.contains("impl")) {
      throw InputError(where + ": expected an object with 'impl' and 'property' or 'cause'");
    }
    const bool cause = e.contains("cause");
    const std::set<std::string>& keys = cause ? by_cause : by_property;
    for (const auto& [key, value] : e.items()) {
      if (!keys.count(key)) {
        throw InputError(fmt::format("{}: unknown field '{}' (an entry by {} has {})", where, key,
                                     cause ? "cause" : "property",
                                     cause ? "impl, cause, finding, reason, fixture, property, "
                                             "unless_cpu_has, if_cpu_has"
                                           : "impl, property, reason, unless_cpu_has, if_cpu_has"));
      }
    }
    if (cause) {
      ExpectedFinding f = finding_entry(e, path, where);
      if (holds_here(e, path, i)) out.findings.push_back(std::move(f));
      continue;
    }
    if (!e["impl"].is_string() || !e.contains("property") || !e["property"].is_string()) {
      throw InputError(path + ": every entry needs string fields 'impl' and 'property'");
    }
    if (holds_here(e, path, i)) {
      out.entries.emplace(e["impl"].get<std::string>(), e["property"].get<std::string>());
    }
  }
  return out;
}

}  // namespace attncheck
