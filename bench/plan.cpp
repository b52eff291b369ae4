#include "plan.h"

#include <algorithm>
#include <sstream>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/registry.h"
#include "host/impl_sources.h"

namespace attncheck::bench {
namespace {

std::vector<int64_t> parse_seq(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 1) {
      throw InputError(fmt::format("--seq: '{}' is not a comma-separated list of lengths >= 1", text));
    }
    out.push_back(v);
  }
  if (out.empty()) throw InputError("--seq: no length given");
  return out;
}

std::pair<int64_t, int64_t> parse_window(const std::string& text) {
  const auto comma = text.find(',');
  try {
    if (comma != std::string::npos) {
      size_t a = 0, b = 0;
      const long long l = std::stoll(text.substr(0, comma), &a);
      const long long r = std::stoll(text.substr(comma + 1), &b);
      if (a == comma && b == text.size() - comma - 1 && l >= -1 && r >= -1) return {l, r};
    }
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("--window: '{}' is not LEFT,RIGHT (keys before and after; -1 = unbounded)", text));
}

DType dtype_option(const std::string& name) {
  try {
    return parse_dtype(name);
  } catch (const std::exception&) {
    throw InputError(fmt::format("--dtype: unknown dtype '{}' (expected f64, f32, bf16 or f16)", name));
  }
}

// Options that apply to a preset's sweeps when given.
void apply_overrides(std::vector<Sweep>& sweeps, const BenchOptions& opt) {
  for (auto& s : sweeps) {
    if (opt.seq) s.seqs = parse_seq(*opt.seq);
    if (opt.batch) s.batch = *opt.batch;
    if (opt.causal) s.causal = true;
  }
}

std::vector<Sweep> custom_sweeps(const BenchOptions& opt, const Plugins& plugins) {
  if (!opt.seq) throw InputError("--seq: required without --preset (e.g. --seq 256,512,1024)");
  Sweep s;
  s.name = "custom";
  s.seqs = parse_seq(*opt.seq);
  s.batch = opt.batch.value_or(1);
  s.heads = opt.heads;
  s.dk = opt.dk;
  s.causal = opt.causal;
  const DType dtype = dtype_option(opt.dtype);
  int64_t wl = -1, wr = -1;
  if (!opt.window.empty()) std::tie(wl, wr) = parse_window(opt.window);
  std::vector<std::string> names = opt.impls;
  if (names.empty())
    for (const auto& p : plugins) names.push_back(p->info().name);
  if (names.empty() && !opt.gru)
    throw InputError("--impl: name an implementation, --plugin, --python or --gru, or use --preset");
  for (const auto& n : names) {
    Series x;
    x.subject = n;
    x.label = opt.layer ? n + " layer" : n;
    x.dtype = dtype;
    x.layer = opt.layer;
    x.window_left = wl;
    x.window_right = wr;
    s.series.push_back(x);
  }
  if (opt.gru) {
    Series g;
    g.subject = kGruSubject;
    g.label = "GRU (matched parameters)";
    s.series.push_back(g);
  }
  s.title = fmt::format("{} B={} H={} dk={}{}{}", opt.dtype, s.batch, s.heads, s.dk, s.causal ? " causal" : "",
                        wl >= 0 || wr >= 0 ? fmt::format(" window [{}, {}]", wl, wr) : "");
  s.reading = wl >= 0 || wr >= 0 ? Reading::window : Reading::none;
  return {s};
}

}  // namespace

std::vector<Sweep> plan_sweeps(const BenchOptions& opt, const Plugins& plugins) {
  if (opt.repeats < 1) throw InputError("--repeats: must be at least 1");
  if (opt.warmup < 0) throw InputError("--warmup: must be at least 0");
  if (opt.threads < 1) throw InputError("--threads: must be at least 1");
  if (opt.batch.value_or(1) < 1 || opt.heads < 1 || opt.dk < 1)
    throw InputError("--batch, --heads, --dk: must be at least 1");
  std::vector<Sweep> sweeps;
  if (!opt.preset.empty()) {
    if (!opt.impls.empty() || opt.gru || opt.layer)
      throw InputError("--preset: fixes its own implementations; drop --impl, --layer and --gru");
    sweeps = preset_sweeps(opt.preset);
    apply_overrides(sweeps, opt);
  } else {
    sweeps = custom_sweeps(opt, plugins);
  }
  for (const auto& sw : sweeps)
    for (const auto& s : sw.series)
      if (s.subject != kGruSubject) {
        PointSpec probe;
        probe.subject = s.subject;
        probe.dtype = s.dtype;
        (void)refusal(probe, plugins);
      }
  return sweeps;
}

int64_t call_timeout_ms(double timeout_s) {
  // At least 1 ms; at most a day, as check --timeout-ms.
  return static_cast<int64_t>(std::clamp(timeout_s, 0.001, 86400.0) * 1000);
}

PointSpec point_spec(const Sweep& sw, const Series& s, int64_t seq, const BenchOptions& opt) {
  PointSpec spec;
  spec.subject = s.subject;
  spec.label = s.label;
  spec.layer = s.layer;
  spec.plugins = opt.plugins;
  spec.python = opt.python;
  spec.dtype = s.dtype;
  spec.seq = seq;
  spec.batch = sw.batch;
  spec.heads = s.heads ? s.heads : sw.heads;
  spec.dk = s.dk ? s.dk : sw.dk;
  spec.causal = sw.causal;
  spec.window_left = s.window_left;
  spec.window_right = s.window_right;
  spec.repeats = opt.repeats;
  spec.warmup = opt.warmup;
  spec.threads = opt.threads;
  spec.seed = opt.seed;
  spec.timeout_s = opt.timeout_s;
  return spec;
}

std::shared_ptr<const Implementation> find_subject(const std::string& subject,
                                                   const Plugins& plugins) {
  if (auto impl = find_implementation(plugins, subject)) return impl;
  throw InputError(fmt::format("--impl: unknown implementation '{}' (see attncheck list)", subject));
}

std::string refusal(const PointSpec& s, const Plugins& plugins) {
  if (s.subject == kGruSubject) return "";
  const ImplInfo& info = find_subject(s.subject, plugins)->info();
  if (!info.supports(s.dtype)) return fmt::format("does not declare {}", dtype_name(s.dtype));
  if ((s.window_left >= 0 || s.window_right >= 0) && !info.has(ATTNCHECK_FEATURE_WINDOW))
    return "does not declare windows";
  if (s.causal && !info.has(ATTNCHECK_FEATURE_CAUSAL)) return "does not declare causal masks";
  const Limits& l = info.limits;
  if ((l.max_tq && s.seq > l.max_tq) || (l.max_tk && s.seq > l.max_tk) ||
      (l.max_batch_heads && s.batch * s.heads > l.max_batch_heads) || (l.dk_min && s.dk < l.dk_min) ||
      (l.dk_max && s.dk > l.dk_max) || (l.dk_multiple && s.dk % l.dk_multiple))
    return "outside its declared limits";
  return "";
}

Plugins load_subjects(const std::vector<std::string>& plugins,
                      const std::vector<std::string>& python, int64_t timeout_ms) {
  ImplSources sources;
  sources.plugins = plugins;
  sources.python = python;
  sources.in_process = true;
  sources.timeout_ms = timeout_ms;
  return load_sources(sources);
}

}  // namespace attncheck::bench
