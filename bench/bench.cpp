// attncheck bench: controlled cost comparisons (exercises 6, 8, 9 and 10).
// The parent parses, plans the points of each comparison, runs every point
// in a child process of its own (bench_run.cpp measures it there), then
// prints the tables grouped by length, the comparison's reading, and writes
// the JSON report and the SVG figure.

#include "bench.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attncheck/error.h"
#include "attncheck/plugin_loader.h"
#include "attncheck/registry.h"
#include "attncheck/version.h"
#include "bench_plot.h"
#include "bench_run.h"

extern char** environ;

namespace attncheck::cli {
namespace {

struct BenchOptions {
  std::vector<std::string> impls, plugins;
  std::string seq, dtype = "f32", report, plot, preset, window, child_spec, child_out;
  int64_t batch = 1, heads = 8, dk = 64;
  int repeats = 5, warmup = 1, threads = 1;
  uint64_t seed = 20260101;
  bool causal = false, layer = false, gru = false;
  double timeout_s = 600;
};

BenchOptions opt;
CLI::App* bench_app = nullptr;

// Lengths up to 256 are short, up to 1024 medium, longer ones long (the
// bands exercise 8 asks results to be grouped by).
std::string length_group(int64_t seq) {
  if (seq <= 256) return "short";
  if (seq <= 1024) return "medium";
  return "long";
}

// One series of a comparison: a subject with its own dtype and attention
// options.
struct Series {
  std::string subject, label;
  DType dtype = DType::f32;
  bool layer = false;
  int64_t window_left = -1, window_right = -1;
  int64_t heads = 0, dk = 0;  // 0: the sweep's
};

// What a comparison concludes from its points.
enum class Reading { none, loop_vs_batched, window, heads, gru, targets };

struct Sweep {
  std::string name, title;
  std::vector<Series> series;
  std::vector<int64_t> seqs;
  int64_t batch = 1, heads = 8, dk = 64;
  bool causal = false;
  Reading reading = Reading::none;
};

Series series(std::string subject, std::string label, DType dtype = DType::f32, int64_t window_left = -1,
              int64_t window_right = -1) {
  Series s;
  s.subject = std::move(subject);
  s.label = std::move(label);
  s.dtype = dtype;
  s.window_left = window_left;
  s.window_right = window_right;
  return s;
}

Series layer_series(std::string subject, std::string label) {
  Series s = series(std::move(subject), std::move(label));
  s.layer = true;
  return s;
}

Sweep sweep(std::string name, std::string title, std::vector<int64_t> seqs, Reading reading) {
  Sweep s;
  s.name = std::move(name);
  s.title = std::move(title);
  s.seqs = std::move(seqs);
  s.reading = reading;
  return s;
}

struct Point {
  PointSpec spec;
  PointResult result;
  std::string sweep;
};

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

bool given(const char* name) { return bench_app->count(name) > 0; }

// The presets: the exercises' comparisons, each holding everything equal
// but the compared thing.
std::vector<Sweep> preset_sweeps(const std::string& name) {
  std::vector<Sweep> out;
  if (name == "loop-vs-batched") {
    Sweep s = sweep("loop-vs-batched", "exercise 6: loop vs batched (f32, B=1 H=8 dk=64)",
                    {64, 128, 256, 512, 1024}, Reading::loop_vs_batched);
    s.series = {series("loop_f32", "loop_f32"), series("batched_f32", "batched_f32")};
    out.push_back(s);
  } else if (name == "window") {
    Sweep s = sweep("window", "exercise 10: global vs window [64, 64] (B=1 H=4 dk=64)",
                    {256, 512, 1024, 2048, 4096}, Reading::window);
    s.heads = 4;
    s.series = {series("batched_f32", "batched_f32 global"),
                series("online_f32", "online_f32 global"),
                series("online_f32", "online_f32 window", DType::f32, 64, 64),
                series("local_f32", "local_f32 window", DType::f32, 64, 64),
                series("local_f64", "local_f64 window", DType::f64, 64, 64),
                series("broken_local_full_matrix", "broken_local_full_matrix window", DType::f64, 64, 64)};
    out.push_back(s);
  } else if (name == "heads") {
    Sweep s = sweep("heads", "exercise 9: heads at d = 256 (layer, f32, B=1)", {128, 512}, Reading::heads);
    for (int64_t h : {1, 2, 4, 8}) {
      for (const char* impl : {"batched_f32", "mha_f32"}) {
        Series x = layer_series(impl, fmt::format("{} layer H={}", impl, h));
        x.heads = h;
        x.dk = 256 / h;
        s.series.push_back(x);
      }
    }
    out.push_back(s);
  } else if (name == "gru") {
    Sweep s = sweep("gru", "exercise 8: attention layer vs GRU, matched parameters (f32, d=256, B=1)",
                    {64, 256, 1024, 4096}, Reading::gru);
    s.heads = 4;
    s.dk = 64;
    s.series = {layer_series("batched_f32", "attention layer (batched_f32)"),
                layer_series("online_f32", "attention layer (online_f32)"),
                series(kGruSubject, "GRU (matched parameters)")};
    out.push_back(s);
  } else if (name == "targets") {
    Sweep s = sweep("targets", "speed targets (f32, B=1 H=8 dk=64)", {256, 512, 1024, 2048}, Reading::targets);
    s.series = {series("batched_f32", "batched_f32"), series("torch_sdpa_f32", "torch_sdpa_f32"),
                series("online_f32", "online_f32")};
    Sweep w = sweep("targets-local", "speed targets: local_f32, window [64, 64] (f32, B=1 H=8 dk=64)",
                    {1024, 2048, 4096, 8192}, Reading::targets);
    w.series = {series("local_f32", "local_f32 window", DType::f32, 64, 64)};
    out.push_back(s);
    out.push_back(w);
  } else if (name == "smoke") {
    // A seconds-long run of every code path (tests/bench.cmake).
    Sweep s = sweep("smoke", "smoke test (f32, B=1 H=2 dk=8)", {16}, Reading::window);
    s.heads = 2;
    s.dk = 8;
    s.series = {series("batched_f32", "batched_f32"), series("online_f32", "online_f32 window", DType::f32, 4, 4),
                series("local_f32", "local_f32 window", DType::f32, 4, 4),
                layer_series("batched_f32", "batched_f32 layer"), series(kGruSubject, "GRU")};
    out.push_back(s);
  } else {
    throw InputError(fmt::format(
        "--preset: unknown preset '{}' (expected loop-vs-batched, window, heads, gru, targets or smoke)", name));
  }
  return out;
}

// Options that apply to a preset's sweeps when given.
void apply_overrides(std::vector<Sweep>& sweeps) {
  for (auto& s : sweeps) {
    if (given("--seq")) s.seqs = parse_seq(opt.seq);
    if (given("--batch")) s.batch = opt.batch;
    if (given("--causal")) s.causal = true;
  }
}

std::vector<Sweep> custom_sweeps(const std::vector<std::shared_ptr<const Implementation>>& plugins) {
  if (!given("--seq")) throw InputError("--seq: required without --preset (e.g. --seq 256,512,1024)");
  Sweep s = sweep("custom", "", parse_seq(opt.seq), Reading::none);
  s.batch = opt.batch;
  s.heads = opt.heads;
  s.dk = opt.dk;
  s.causal = opt.causal;
  const DType dtype = dtype_option(opt.dtype);
  int64_t wl = -1, wr = -1;
  if (!opt.window.empty()) std::tie(wl, wr) = parse_window(opt.window);
  std::vector<std::string> names = opt.impls;
  if (names.empty())
    for (const auto& p : plugins) names.push_back(p->info().name);
  if (names.empty() && !opt.gru) throw InputError("--impl: name an implementation, --plugin or --gru, or use --preset");
  for (const auto& n : names) {
    Series x = series(n, opt.layer ? n + " layer" : n, dtype, wl, wr);
    x.layer = opt.layer;
    s.series.push_back(x);
  }
  if (opt.gru) s.series.push_back(series(kGruSubject, "GRU (matched parameters)"));
  s.title = fmt::format("{} B={} H={} dk={}{}{}", opt.dtype, s.batch, s.heads, s.dk, s.causal ? " causal" : "",
                        wl >= 0 || wr >= 0 ? fmt::format(" window [{}, {}]", wl, wr) : "");
  s.reading = wl >= 0 || wr >= 0 ? Reading::window : Reading::none;
  return {s};
}

// Runs one point in a child process: `attncheck bench --child SPEC`.
PointResult run_in_child(const PointSpec& spec, const std::filesystem::path& dir, int index) {
  const std::string spec_path = (dir / fmt::format("point-{}.json", index)).string();
  const std::string result_path = (dir / fmt::format("point-{}.result.json", index)).string();
  std::ofstream(spec_path) << to_json(spec).dump() << "\n";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.rfind("OMP_NUM_THREADS=", 0) == 0 || v.rfind("OPENBLAS_NUM_THREADS=", 0) == 0 ||
        v.rfind("MKL_NUM_THREADS=", 0) == 0)
      continue;
    env_strings.push_back(v);
  }
  // Applied before the libraries start their thread pools.
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
    env_strings.push_back(fmt::format("{}={}", var, spec.threads));
  std::vector<char*> env;
  for (auto& v : env_strings) env.push_back(v.data());
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe", cmd = "attncheck", sub = "bench", flag = "--child",
              out_flag = "--child-out";
  std::vector<char*> argv = {cmd.data(), sub.data(), flag.data(), const_cast<char*>(spec_path.c_str()),
                             out_flag.data(), const_cast<char*>(result_path.c_str()), nullptr};
  pid_t pid = 0;
  PointResult r;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), env.data()) != 0) {
    r.status = "error";
    r.message = "cannot start a child process";
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt.timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.status = "timeout";
      r.message = fmt::format("no result within --timeout {} s", opt.timeout_s);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(result_path);
  if (!WIFEXITED(status) || !in) {
    r.status = "error";
    r.message = WIFSIGNALED(status) ? fmt::format("child killed by signal {}", WTERMSIG(status))
                                    : "child wrote no result";
    return r;
  }
  return result_from_json(nlohmann::json::parse(in));
}

// The reason a series cannot run a point, checked in the parent so the
// harness's rule (only problems inside an implementation's declaration)
// holds; empty when it can.
std::string refusal(const PointSpec& s, const std::vector<std::shared_ptr<const Implementation>>& plugins) {
  if (s.subject == kGruSubject) return "";
  std::shared_ptr<const Implementation> impl;
  for (const auto& p : plugins)
    if (p->info().name == s.subject) impl = p;
  if (!impl) impl = find_impl(s.subject);
  if (!impl) throw InputError(fmt::format("--impl: unknown implementation '{}' (see attncheck list)", s.subject));
  const ImplInfo& info = impl->info();
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

std::string human_bytes(std::optional<int64_t> b) {
  if (!b) return "n/a";
  return fmt::format("{:.1f}", static_cast<double>(*b) / (1 << 20));
}

std::string time_text(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

void print_row(const Point& p) {
  const auto& r = p.result;
  if (r.status != "ok") {
    fmt::print("  {:<34} {:>6}  {}{}\n", p.spec.label, p.spec.seq, r.status, r.message.empty() ? "" : ": " + r.message);
    return;
  }
  const std::string elements = r.score_elements ? fmt::format("{}", *r.score_elements) : "n/a";
  const std::string params = r.parameters ? fmt::format("{}", *r.parameters) : "";
  fmt::print("  {:<34} {:>6} {:>11} {:>11} {:>11} {:>11} {:>9} {:>13} {:>8.2f} {:>9}\n", p.spec.label,
             p.spec.seq, time_text(r.median_s), time_text(r.min_s), time_text(r.max_s), time_text(r.median_cpu_s),
             human_bytes(r.peak_bytes), elements, r.flops / r.median_s / 1e9, params);
}

// Least-squares slope of log(value) against log(T): 1 is linear, 2 quadratic.
std::optional<double> growth(const std::vector<std::pair<double, double>>& pts) {
  std::vector<std::pair<double, double>> l;
  for (const auto& [x, y] : pts)
    if (x > 0 && y > 0) l.emplace_back(std::log(x), std::log(y));
  if (l.size() < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (const auto& [x, y] : l) {
    mx += x;
    my += y;
  }
  mx /= static_cast<double>(l.size());
  my /= static_cast<double>(l.size());
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : l) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  return sxx > 0 ? std::optional<double>(sxy / sxx) : std::nullopt;
}

std::string slope_text(std::optional<double> s) { return s ? fmt::format("T^{:.2f}", *s) : "n/a"; }

struct Machine {
  std::string cpu;
  double mhz = 0;
  int lanes = 4;  // f32 lanes of the widest FMA vector
  bool fma = false;
  double peak_gflops = 0, avx2_peak_gflops = 0;
  std::string how;
};

// The f32 FMA peak of `threads` cores: cores x 2 FMA pipes (Zen 2-5 and
// Intel's Haswell to Sapphire Rapids server cores have two) x lanes of the
// widest vector the flags name x 2 flops per FMA x the clock /proc/cpuinfo
// reports (cpuinfo_max_freq where cpufreq exposes it). An estimate: a VM's
// MHz is the host's nominal clock, and turbo or AVX-512 clock offsets move it.
Machine machine(int threads) {
  Machine m;
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && m.cpu.empty()) m.cpu = value;
    if (key == "cpu MHz" && m.mhz == 0) m.mhz = std::atof(value.c_str());
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  std::ifstream max_freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (max_freq >> khz && khz > 0) m.mhz = khz / 1000;
  m.fma = flags.find(" fma ") != std::string::npos;
  const bool avx2 = flags.find(" avx2 ") != std::string::npos;
  m.lanes = flags.find(" avx512f ") != std::string::npos ? 16 : avx2 || flags.find(" avx ") != std::string::npos ? 8 : 4;
  const double per_cycle = 2.0 * m.lanes * (m.fma ? 2.0 : 1.0);
  m.peak_gflops = threads * per_cycle * m.mhz / 1000;
  m.avx2_peak_gflops = threads * 2.0 * 8 * 2 * m.mhz / 1000;
  m.how = fmt::format("{} thread(s) x 2 FMA pipes x {} f32 lanes ({}) x 2 flops x {:.0f} MHz", threads, m.lanes,
                      m.lanes == 16 ? "AVX-512" : m.lanes == 8 ? "AVX2" : "SSE", m.mhz);
  return m;
}

const Point* find_point(const std::vector<Point>& points, const std::string& label, int64_t seq) {
  for (const auto& p : points)
    if (p.spec.label == label && p.spec.seq == seq && p.result.status == "ok") return &p;
  return nullptr;
}

// (T, median wall time), (T, peak bytes) or, with `cpu`, (T, median CPU time).
std::vector<std::pair<double, double>> curve(const std::vector<Point>& points, const std::string& label,
                                             bool memory, bool cpu = false) {
  std::vector<std::pair<double, double>> out;
  for (const auto& p : points) {
    if (p.spec.label != label || p.result.status != "ok") continue;
    const double y = memory ? (p.result.peak_bytes ? static_cast<double>(*p.result.peak_bytes) : 0)
                     : cpu  ? p.result.median_cpu_s
                            : p.result.median_s;
    out.emplace_back(static_cast<double>(p.spec.seq), y);
  }
  return out;
}

// The comparison's reading: what the figures say about the compared thing.
std::vector<std::string> read_sweep(const Sweep& sw, const std::vector<Point>& points, const Machine& m) {
  std::vector<std::string> out;
  std::vector<std::string> labels;
  for (const auto& s : sw.series) labels.push_back(s.label);
  const int64_t longest = sw.seqs.empty() ? 0 : *std::max_element(sw.seqs.begin(), sw.seqs.end());
  switch (sw.reading) {
    case Reading::loop_vs_batched:
      for (int64_t t : sw.seqs) {
        const Point* l = find_point(points, "loop_f32", t);
        const Point* b = find_point(points, "batched_f32", t);
        if (l && b) {
          out.push_back(fmt::format("T={}: batched_f32 {:.1f}x faster than loop_f32; peak memory {} vs {} MiB",
                                    t, l->result.median_s / b->result.median_s, human_bytes(b->result.peak_bytes),
                                    human_bytes(l->result.peak_bytes)));
        }
      }
      break;
    case Reading::window:
      for (const auto& s : sw.series) {
        const Point* p = find_point(points, s.label, longest);
        if (!p) continue;
        const double full = static_cast<double>(p->spec.batch * p->spec.heads * p->spec.seq * p->spec.seq);
        const double band = static_cast<double>(allowed_pairs(p->spec));
        const auto t = growth(curve(points, s.label, false)), mem = growth(curve(points, s.label, true));
        std::string line = fmt::format("{}: at T={} ", s.label, longest);
        if (p->result.score_elements) {
          const double frac = static_cast<double>(*p->result.score_elements) / full;
          line += fmt::format("forms {:.1f}% of the T^2 scores (the allowed band is {:.1f}%)", 100 * frac,
                              100 * band / full);
          const bool windowed = s.window_left >= 0 || s.window_right >= 0;
          if (windowed && frac > 0.9) line += "; it masks the full matrix: no saving from the window";
        } else {
          line += "score elements n/a (not instrumented)";
        }
        line += fmt::format("; time grows as {} (CPU time as {}), peak memory as {}", slope_text(t),
                            slope_text(growth(curve(points, s.label, false, true))), slope_text(mem));
        if ((s.window_left >= 0 || s.window_right >= 0) && t && *t > 1.5)
          line += " (the time does not follow the band: quadratic work remains)";
        out.push_back(line);
      }
      break;
    case Reading::heads: {
      std::map<std::string, std::set<int64_t>> params;
      for (const auto& p : points)
        if (p.result.parameters) params[p.spec.subject].insert(*p.result.parameters);
      for (const auto& [impl, set] : params)
        out.push_back(fmt::format("{}: parameter count {} for every H at d = 256", impl,
                                  set.size() == 1 ? fmt::format("{}", *set.begin()) : "varies with H"));
      for (int64_t t : sw.seqs)
        for (const char* impl : {"batched_f32", "mha_f32"}) {
          std::string line = fmt::format("T={} {} layer time by H:", t, impl);
          for (int64_t h : {1, 2, 4, 8})
            if (const Point* p = find_point(points, fmt::format("{} layer H={}", impl, h), t))
              line += fmt::format(" H={} {}", h, time_text(p->result.median_s));
          out.push_back(line);
        }
      break;
    }
    case Reading::gru:
      for (int64_t t : sw.seqs) {
        const Point* a = find_point(points, sw.series[0].label, t);
        const Point* g = find_point(points, kGruSubject == sw.series.back().subject ? sw.series.back().label : "", t);
        if (a && g) {
          out.push_back(fmt::format(
              "T={} ({}): attention layer {} / {} MiB ({} parameters) vs GRU (hidden {}) {} / {} MiB ({} parameters)",
              t, length_group(t), time_text(a->result.median_s), human_bytes(a->result.peak_bytes),
              a->result.parameters.value_or(0), g->result.gru_hidden, time_text(g->result.median_s),
              human_bytes(g->result.peak_bytes), g->result.parameters.value_or(0)));
        }
      }
      break;
    case Reading::targets:
      if (sw.name == "targets") {
        const Point* b = find_point(points, "batched_f32", 1024);
        const Point* t = find_point(points, "torch_sdpa_f32", 1024);
        const Point* o = find_point(points, "online_f32", 1024);
        if (b) {
          // CPU time: on a shared machine the wall time includes waits.
          const double gf = b->result.flops / b->result.median_cpu_s / 1e9;
          out.push_back(fmt::format(
              "batched_f32 at T=1024: CPU {}, {:.1f} GFLOP/s = {:.0f}% of the estimated f32 FMA peak {:.0f} GFLOP/s "
              "({:.0f}% of the AVX2 peak {:.0f}; peak: {})",
              time_text(b->result.median_cpu_s), gf, 100 * gf / m.peak_gflops, m.peak_gflops,
              100 * gf / m.avx2_peak_gflops, m.avx2_peak_gflops, m.how));
        }
        if (b && t) {
          out.push_back(fmt::format(
              "target batched_f32 <= torch_sdpa_f32 at T=1024: wall {} vs {} ({:.2f}x): {}; CPU {} vs {} "
              "({:.2f}x): {}",
              time_text(b->result.median_s), time_text(t->result.median_s), t->result.median_s / b->result.median_s,
              b->result.median_s <= t->result.median_s ? "met" : "NOT met", time_text(b->result.median_cpu_s),
              time_text(t->result.median_cpu_s), t->result.median_cpu_s / b->result.median_cpu_s,
              b->result.median_cpu_s <= t->result.median_cpu_s ? "met" : "NOT met"));
          out.push_back(fmt::format("torch_sdpa_f32 at T=1024: {:.1f} GFLOP/s (CPU time)",
                                    t->result.flops / t->result.median_cpu_s / 1e9));
        } else if (b) {
          out.push_back("torch_sdpa_f32 not measured (LibTorch adapters not built?)");
        }
        if (b && o) {
          out.push_back(fmt::format("target online_f32 <= 1.5 x batched_f32 at T=1024: wall {:.2f}x: {}; CPU {:.2f}x: {}",
                                    o->result.median_s / b->result.median_s,
                                    o->result.median_s <= 1.5 * b->result.median_s ? "met" : "NOT met",
                                    o->result.median_cpu_s / b->result.median_cpu_s,
                                    o->result.median_cpu_s <= 1.5 * b->result.median_cpu_s ? "met" : "NOT met"));
        }
        const auto om = growth(curve(points, "online_f32", true));
        out.push_back(fmt::format("online_f32 peak memory grows as {} (target: linear)", slope_text(om)));
      } else {
        const auto lt = growth(curve(points, "local_f32 window", false, true));
        const auto lm = growth(curve(points, "local_f32 window", true));
        out.push_back(fmt::format("local_f32 (window [64, 64]) CPU time grows as {}, peak memory as {} (target: about linear)",
                                  slope_text(lt), slope_text(lm)));
      }
      break;
    case Reading::none:
      break;
  }
  return out;
}

int run_bench() {
  const auto plugins = load_plugins(opt.plugins);
  if (opt.repeats < 1) throw InputError("--repeats: must be at least 1");
  if (opt.warmup < 0) throw InputError("--warmup: must be at least 0");
  if (opt.threads < 1) throw InputError("--threads: must be at least 1");
  if (opt.batch < 1 || opt.heads < 1 || opt.dk < 1) throw InputError("--batch, --heads, --dk: must be at least 1");
  std::vector<Sweep> sweeps;
  if (!opt.preset.empty()) {
    if (!opt.impls.empty() || opt.gru || opt.layer)
      throw InputError("--preset: fixes its own implementations; drop --impl, --layer and --gru");
    sweeps = preset_sweeps(opt.preset);
    apply_overrides(sweeps);
  } else {
    sweeps = custom_sweeps(plugins);
  }
  // Every name is checked before anything runs.
  for (const auto& sw : sweeps)
    for (const auto& s : sw.series)
      if (s.subject != kGruSubject) {
        PointSpec probe;
        probe.subject = s.subject;
        probe.dtype = s.dtype;
        (void)refusal(probe, plugins);
      }
  std::string plot_tmp, report_tmp;
  if (!opt.plot.empty() && !std::ofstream(opt.plot, std::ios::app))
    throw InputError(fmt::format("--plot: cannot write '{}'", opt.plot));
  if (!opt.report.empty() && !std::ofstream(opt.report, std::ios::app))
    throw InputError(fmt::format("--report: cannot write '{}'", opt.report));

  const Machine m = machine(opt.threads);
  char dir_template[] = "/tmp/attncheck-bench-XXXXXX";
  if (!mkdtemp(dir_template)) throw InputError("cannot create a temporary folder in /tmp");
  const std::filesystem::path dir = dir_template;

  fmt::print("attncheck bench: threads {} (Eigen, OpenMP, OpenBLAS, torch), repeats {} after {} warm-up, seed {}\n",
             opt.threads, opt.repeats, opt.warmup, opt.seed);
  fmt::print("machine: {}; estimated f32 FMA peak {:.0f} GFLOP/s ({})\n", m.cpu, m.peak_gflops, m.how);
  std::vector<Point> points;
  std::vector<PlotRow> rows;
  nlohmann::json analysis = nlohmann::json::array();
  int index = 0;
  for (const auto& sw : sweeps) {
    fmt::print("\n== {}: {}\n", sw.name, sw.title);
    std::vector<Point> mine;
    std::string group;
    std::vector<int64_t> seqs = sw.seqs;
    std::sort(seqs.begin(), seqs.end());
    for (int64_t seq : seqs) {
      if (length_group(seq) != group) {
        group = length_group(seq);
        fmt::print("{} (T {})\n", group,
                   group == "short" ? "<= 256" : group == "medium" ? "257..1024" : "> 1024");
        fmt::print("  {:<34} {:>6} {:>11} {:>11} {:>11} {:>11} {:>9} {:>13} {:>8} {:>9}\n", "series", "T",
                   "median", "min", "max", "median CPU", "peak MiB", "score elems", "GFLOP/s", "params");
      }
      for (const auto& s : sw.series) {
        Point p;
        p.sweep = sw.name;
        PointSpec& spec = p.spec;
        spec.subject = s.subject;
        spec.label = s.label;
        spec.layer = s.layer;
        spec.plugins = opt.plugins;
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
        if (const std::string why = refusal(spec, plugins); !why.empty()) {
          p.result.status = "unsupported";
          p.result.message = why;
        } else {
          p.result = run_in_child(spec, dir, index++);
        }
        print_row(p);
        std::fflush(stdout);
        mine.push_back(p);
      }
    }
    const auto lines = read_sweep(sw, mine, m);
    for (const auto& l : lines) {
      fmt::print("  -> {}\n", l);
      analysis.push_back({{"comparison", sw.name}, {"reading", l}});
    }
    PlotRow row;
    row.title = sw.name;
    for (const auto& s : sw.series) {
      PlotSeries ps;
      ps.label = s.label;
      ps.time_s = curve(mine, s.label, false);
      ps.peak_bytes = curve(mine, s.label, true);
      row.series.push_back(ps);
    }
    rows.push_back(row);
    points.insert(points.end(), mine.begin(), mine.end());
  }
  std::filesystem::remove_all(dir);

  if (!opt.report.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const auto& p : points) {
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
      results.push_back(j);
    }
    nlohmann::json doc = {{"format", "attncheck-bench-1"}, {"attncheck", version()},
                          {"seed", opt.seed}, {"threads", opt.threads}, {"preset", opt.preset},
                          {"machine", {{"cpu", m.cpu}, {"mhz", m.mhz}, {"f32_lanes", m.lanes},
                                       {"peak_gflops_f32", m.peak_gflops}, {"peak_how", m.how}}},
                          {"results", results}, {"analysis", analysis}};
    std::ofstream out(opt.report);
    out << doc.dump(2) << "\n";
    if (!out) throw InputError(fmt::format("--report: cannot write '{}'", opt.report));
  }
  if (!opt.plot.empty()) {
    std::ofstream out(opt.plot);
    out << render_svg(rows);
    if (!out) throw InputError(fmt::format("--plot: cannot write '{}'", opt.plot));
  }
  return 0;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app) {
  CLI::App* b = app.add_subcommand(
      "bench", "time and peak memory of implementations by sequence length, each in its own process");
  bench_app = b;
  b->add_option("--impl", opt.impls, "implementation to measure (repeatable)");
  b->add_option("--plugin", opt.plugins, "load this plugin; its implementations are measured unless --impl names some");
  b->add_option("--seq", opt.seq, "sequence lengths T (tq = tk), comma-separated");
  b->add_option("--batch", opt.batch, "batch size B (default 1)");
  b->add_option("--heads", opt.heads, "heads H (default 8)");
  b->add_option("--dk", opt.dk, "head dimension dk = dv (default 64)");
  b->add_option("--dtype", opt.dtype, "f64, f32, bf16 or f16 (default f32)");
  b->add_option("--repeats", opt.repeats, "timed runs per point (default 5)");
  b->add_option("--warmup", opt.warmup, "untimed runs first (default 1)");
  b->add_option("--threads", opt.threads, "threads for Eigen, OpenMP, OpenBLAS and torch (default 1)");
  b->add_option("--seed", opt.seed, "seed of the generated inputs (the same for every implementation)");
  b->add_flag("--causal", opt.causal, "causal mask");
  b->add_option("--window", opt.window, "sliding window LEFT,RIGHT (keys before and after each query)");
  b->add_flag("--layer", opt.layer, "measure a layer of width H * dk around each implementation (projections included)");
  b->add_flag("--gru", opt.gru, "also measure a GRU layer of the attention layer's parameter count");
  b->add_option("--preset", opt.preset, "loop-vs-batched, window, heads, gru, targets (or smoke)");
  b->add_option("--timeout", opt.timeout_s, "seconds one point may take (default 600)");
  b->add_option("--report", opt.report, "write the results as JSON");
  b->add_option("--plot", opt.plot, "write time and peak memory against T as SVG");
  b->add_option("--child", opt.child_spec)->group("");
  b->add_option("--child-out", opt.child_out)->group("");
  return b;
}

int bench_command() {
  if (!opt.child_spec.empty()) return run_child(opt.child_spec, opt.child_out);
  return run_bench();
}

}  // namespace attncheck::cli
