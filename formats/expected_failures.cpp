#include "attncheck/fixture.h"

#include <fstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attncheck/dtype.h"
#include "formats/json.h"

namespace attncheck {
namespace {

// The CPU features an entry's "unless_cpu_has" may name, asked of this
// machine at run time (__builtin_cpu_supports takes literals only). They
// are the ones a kernel's dispatch is known to turn on: LibTorch 1.13 hands
// bf16 products to oneDNN only with AVX512BW, VL and DQ
// (mkldnn_bf16_device_check). Off x86 every feature reads as absent.
struct CpuFeature {
  std::string_view name;
  bool present;
};

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
    };
#else
    return std::vector<CpuFeature>{{"avx2", false},     {"fma", false},
                                   {"avx512f", false},  {"avx512bw", false}, {"avx512vl", false},
                                   {"avx512dq", false}};
#endif
  }();
  return features;
}

std::string known_cpu_features() {
  std::string s;
  for (const CpuFeature& f : cpu_features()) s += fmt::format("{}{}", s.empty() ? "" : ", ", f.name);
  return s;
}

// Whether an entry holds on this machine: always, or (with
// "unless_cpu_has") when the CPU lacks one of the features named, where a
// kernel takes the path the finding is about.
bool holds_here(const nlohmann::json& e, const std::string& path, size_t index) {
  if (!e.contains("unless_cpu_has")) return true;
  const nlohmann::json& names = e["unless_cpu_has"];
  const std::string where = fmt::format("{}: entry {}: field 'unless_cpu_has'", path, index);
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
  return !has_all;
}

}  // namespace

ExpectedFailures load_expected_failures(const std::string& path) {
  ExpectedFailures out;
  out.path = path;
  if (!std::ifstream(path)) return out;  // no file: nothing expected to fail
  const nlohmann::json j = read_json_file(path);  // size and nesting limits
  const nlohmann::json& list = j.is_object() ? j.value("expected_failures", nlohmann::json()) : j;
  if (!list.is_array()) throw InputError(path + ": expected an array of {impl, property, reason}");
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    if (!e.is_object() || !e.contains("impl") || !e.contains("property") ||
        !e["impl"].is_string() || !e["property"].is_string()) {
      throw InputError(path + ": every entry needs string fields 'impl' and 'property'");
    }
    if (holds_here(e, path, i)) {
      out.entries.emplace(e["impl"].get<std::string>(), e["property"].get<std::string>());
    }
  }
  return out;
}

}  // namespace attncheck
