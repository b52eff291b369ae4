#include "report.h"

#include <fstream>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"

namespace attncheck::bench {
namespace {

nlohmann::json result_json(const Point& p) {
  const auto& s = p.spec;
  const auto& r = p.result;
  nlohmann::json j = {{"impl", s.subject}, {"label", s.label}, {"comparison", p.sweep},
                      {"group", length_group(s.seq)}, {"seq", s.seq}, {"batch", s.batch},
                      {"heads", s.heads}, {"dk", s.dk}, {"dtype", std::string(dtype_name(s.dtype))},
                      {"layer", s.layer}, {"causal", s.causal}, {"window", {s.window_left, s.window_right}},
                      {"status", r.status}, {"message", r.message}, {"threads", s.threads},
                      {"repeats", s.repeats}, {"warmup", s.warmup}};
  const auto with = to_json(r);
  for (const char* k : {"median_s", "min_s", "max_s", "times_s", "median_cpu_s", "cpu_s", "peak_bytes", "peak_method",
                        "score_elements", "parameters", "flops"})
    j[k] = with[k];
  j["allowed_pairs"] = s.subject == kGruSubject ? nlohmann::json(nullptr) : nlohmann::json(allowed_pairs(s));
  j["gflops"] = r.status == "ok" && r.median_s > 0 ? nlohmann::json(r.flops / r.median_s / 1e9)
                                                    : nlohmann::json(nullptr);
  if (s.subject == kGruSubject) j["gru_hidden"] = r.gru_hidden;
  return j;
}

}  // namespace

nlohmann::json report_json(const BenchOptions& opt, const Machine& m, const std::vector<Point>& points,
                           const std::vector<ReadingLine>& analysis) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto& p : points) results.push_back(result_json(p));
  nlohmann::json lines = nlohmann::json::array();
  for (const auto& l : analysis) lines.push_back({{"comparison", l.comparison}, {"reading", l.text}});
  return {{"format", "attncheck-bench-1"}, {"attncheck", version()},
          {"seed", opt.seed}, {"threads", opt.threads}, {"preset", opt.preset},
          {"machine", {{"cpu", m.cpu}, {"mhz", m.mhz}, {"f32_lanes", m.lanes},
                       {"peak_gflops_f32", m.peak_gflops}, {"peak_how", m.how}}},
          {"results", results}, {"analysis", lines}};
}

void write_report(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  if (!out) throw InputError(fmt::format("--report: cannot write '{}'", path));
}

}  // namespace attncheck::bench
