#include "point.h"

#include <algorithm>

namespace attncheck::bench {

nlohmann::json to_json(const PointSpec& s) {
  return {{"subject", s.subject}, {"label", s.label},     {"layer", s.layer},
          {"plugins", s.plugins}, {"python", s.python}, {"dtype", std::string(dtype_name(s.dtype))},
          {"seq", s.seq},         {"batch", s.batch},     {"heads", s.heads},
          {"dk", s.dk},           {"causal", s.causal},   {"window", {s.window_left, s.window_right}},
          {"repeats", s.repeats}, {"warmup", s.warmup},   {"threads", s.threads},
          {"seed", s.seed},       {"timeout_s", s.timeout_s}};
}

PointSpec spec_from_json(const nlohmann::json& j) {
  PointSpec s;
  s.subject = j.at("subject").get<std::string>();
  s.label = j.at("label").get<std::string>();
  s.layer = j.at("layer").get<bool>();
  s.plugins = j.at("plugins").get<std::vector<std::string>>();
  s.python = j.at("python").get<std::vector<std::string>>();
  s.dtype = parse_dtype(j.at("dtype").get<std::string>());
  s.seq = j.at("seq").get<int64_t>();
  s.batch = j.at("batch").get<int64_t>();
  s.heads = j.at("heads").get<int64_t>();
  s.dk = j.at("dk").get<int64_t>();
  s.causal = j.at("causal").get<bool>();
  s.window_left = j.at("window").at(0).get<int64_t>();
  s.window_right = j.at("window").at(1).get<int64_t>();
  s.repeats = j.at("repeats").get<int>();
  s.warmup = j.at("warmup").get<int>();
  s.threads = j.at("threads").get<int>();
  s.seed = j.at("seed").get<uint64_t>();
  s.timeout_s = j.at("timeout_s").get<double>();
  return s;
}

nlohmann::json to_json(const PointResult& r) {
  nlohmann::json j = {{"status", r.status},   {"message", r.message}, {"times_s", r.times_s},
                      {"median_s", r.median_s}, {"min_s", r.min_s},   {"max_s", r.max_s},
                      {"cpu_s", r.cpu_s},       {"median_cpu_s", r.median_cpu_s},
                      {"peak_method", r.peak_method}, {"flops", r.flops},
                      {"gru_hidden", r.gru_hidden}};
  j["peak_bytes"] = r.peak_bytes ? nlohmann::json(*r.peak_bytes) : nlohmann::json(nullptr);
  j["score_elements"] =
      r.score_elements ? nlohmann::json(*r.score_elements) : nlohmann::json(nullptr);
  j["parameters"] = r.parameters ? nlohmann::json(*r.parameters) : nlohmann::json(nullptr);
  return j;
}

PointResult result_from_json(const nlohmann::json& j) {
  PointResult r;
  r.status = j.at("status").get<std::string>();
  r.message = j.at("message").get<std::string>();
  r.times_s = j.at("times_s").get<std::vector<double>>();
  r.median_s = j.at("median_s").get<double>();
  r.min_s = j.at("min_s").get<double>();
  r.max_s = j.at("max_s").get<double>();
  r.cpu_s = j.at("cpu_s").get<std::vector<double>>();
  r.median_cpu_s = j.at("median_cpu_s").get<double>();
  r.peak_method = j.at("peak_method").get<std::string>();
  r.flops = j.at("flops").get<double>();
  r.gru_hidden = j.at("gru_hidden").get<int64_t>();
  if (!j.at("peak_bytes").is_null()) r.peak_bytes = j.at("peak_bytes").get<int64_t>();
  if (!j.at("score_elements").is_null()) r.score_elements = j.at("score_elements").get<int64_t>();
  if (!j.at("parameters").is_null()) r.parameters = j.at("parameters").get<int64_t>();
  return r;
}

int64_t allowed_pairs(const PointSpec& s) {
  int64_t n = 0;
  for (int64_t i = 0; i < s.seq; ++i) {
    int64_t first = 0, last = s.seq - 1;
    if (s.window_left >= 0) first = std::max<int64_t>(0, i - s.window_left);
    if (s.window_right >= 0) last = std::min(last, i + s.window_right);
    if (s.causal) last = std::min(last, i);
    n += std::max<int64_t>(0, last - first + 1);
  }
  return n * s.batch * s.heads;
}

std::string length_group(int64_t seq) {
  if (seq <= 256) return "short";
  if (seq <= 1024) return "medium";
  return "long";
}

}  // namespace attncheck::bench
