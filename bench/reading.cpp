#include "reading.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fit.h"
#include "table.h"

namespace attncheck::bench {
namespace {

bool windowed(const Series& s) { return s.window_left >= 0 || s.window_right >= 0; }

const Series* find_series(const Sweep& sw, const std::string& label) {
  for (const auto& s : sw.series)
    if (s.label == label) return &s;
  return nullptr;
}

void read_speedup(const Sweep& sw, const std::vector<Point>& points, std::vector<std::string>& out) {
  for (int64_t t : sw.seqs) {
    const Point* base = find_point(points, sw.baseline, t);
    if (!base) continue;
    for (const auto& s : sw.series) {
      if (s.label == sw.baseline) continue;
      if (const Point* p = find_point(points, s.label, t)) {
        out.push_back(fmt::format("T={}: {} {:.1f}x faster than {}; peak memory {} vs {} MiB", t, s.label,
                                  base->result.median_s / p->result.median_s, sw.baseline,
                                  human_bytes(p->result.peak_bytes), human_bytes(base->result.peak_bytes)));
      }
    }
  }
}

void read_window(const Sweep& sw, const std::vector<Point>& points, std::vector<std::string>& out) {
  const int64_t longest = sw.seqs.empty() ? 0 : *std::max_element(sw.seqs.begin(), sw.seqs.end());
  for (const auto& s : sw.series) {
    const Point* p = find_point(points, s.label, longest);
    if (!p) continue;
    const double full = static_cast<double>(p->spec.batch * p->spec.heads * p->spec.seq * p->spec.seq);
    const double band = static_cast<double>(allowed_pairs(p->spec));
    const auto t = growth(curve(points, s.label, Measure::wall));
    const auto mem = growth(curve(points, s.label, Measure::memory));
    std::string line = fmt::format("{}: at T={} ", s.label, longest);
    if (p->result.score_elements) {
      const double frac = static_cast<double>(*p->result.score_elements) / full;
      line += fmt::format("forms {:.1f}% of the T^2 scores (the allowed band is {:.1f}%)", 100 * frac,
                          100 * band / full);
      if (windowed(s) && frac > 0.9) line += "; it masks the full matrix: no saving from the window";
    } else {
      line += "score elements n/a (not instrumented)";
    }
    line += fmt::format("; time grows as {} (CPU time as {}), peak memory as {}", slope_text(t),
                        slope_text(growth(curve(points, s.label, Measure::cpu))), slope_text(mem));
    if (windowed(s) && t && *t > 1.5) line += " (the time does not follow the band: quadratic work remains)";
    out.push_back(line);
  }
}

// Each subject's parameter count across its series, then its time by
// number of heads at every length.
void read_heads(const Sweep& sw, const std::vector<Point>& points, std::vector<std::string>& out) {
  std::map<std::string, std::set<int64_t>> params;
  std::map<std::string, int64_t> width;
  for (const auto& p : points)
    if (p.result.parameters) {
      params[p.spec.subject].insert(*p.result.parameters);
      width[p.spec.subject] = p.spec.heads * p.spec.dk;
    }
  for (const auto& [subject, set] : params)
    out.push_back(fmt::format("{}: parameter count {} for every H at d = {}", subject,
                              set.size() == 1 ? fmt::format("{}", *set.begin()) : "varies with H", width[subject]));
  std::vector<std::string> subjects;
  for (const auto& s : sw.series)
    if (std::find(subjects.begin(), subjects.end(), s.subject) == subjects.end()) subjects.push_back(s.subject);
  for (int64_t t : sw.seqs)
    for (const auto& subject : subjects) {
      std::string line = fmt::format("T={} {} layer time by H:", t, subject);
      for (const auto& s : sw.series)
        if (s.subject == subject)
          if (const Point* p = find_point(points, s.label, t))
            line += fmt::format(" H={} {}", p->spec.heads, time_text(p->result.median_s));
      out.push_back(line);
    }
}

void read_gru(const Sweep& sw, const std::vector<Point>& points, std::vector<std::string>& out) {
  for (int64_t t : sw.seqs) {
    const Point* a = find_point(points, sw.series[0].label, t);
    const Point* g = find_point(points, kGruSubject == sw.series.back().subject ? sw.series.back().label : "", t);
    if (a && g) {
      out.push_back(fmt::format(
          "T={} ({}): attention layer {} / {} MiB ({} parameters) vs GRU (hidden {}) {} / {} MiB ({} parameters)", t,
          length_group(t), time_text(a->result.median_s), human_bytes(a->result.peak_bytes),
          a->result.parameters.value_or(0), g->result.gru_hidden, time_text(g->result.median_s),
          human_bytes(g->result.peak_bytes), g->result.parameters.value_or(0)));
    }
  }
}

std::string met(bool ok) { return ok ? "met" : "NOT met"; }

void read_targets(const Sweep& sw, const std::vector<Point>& points, const Machine& m,
                  std::vector<std::string>& out) {
  const int64_t at = sw.target_seq;
  const Point* b = sw.baseline.empty() ? nullptr : find_point(points, sw.baseline, at);
  if (b) {
    // CPU time: on a shared machine the wall time includes waits.
    const double gf = b->result.flops / b->result.median_cpu_s / 1e9;
    out.push_back(fmt::format(
        "{} at T={}: CPU {}, {:.1f} GFLOP/s = {:.0f}% of the estimated f32 FMA peak {:.0f} GFLOP/s "
        "({:.0f}% of the AVX2 peak {:.0f}; peak: {})",
        sw.baseline, at, time_text(b->result.median_cpu_s), gf, 100 * gf / m.peak_gflops, m.peak_gflops,
        100 * gf / m.avx2_peak_gflops, m.avx2_peak_gflops, m.how));
  }
  for (const auto& target : sw.targets) {
    const std::string& label = target.label;
    switch (target.kind) {
      case Target::Kind::no_slower: {
        const Point* t = find_point(points, label, at);
        if (b && t) {
          out.push_back(fmt::format(
              "target {} <= {} at T={}: wall {} vs {} ({:.2f}x): {}; CPU {} vs {} ({:.2f}x): {}", sw.baseline, label,
              at, time_text(b->result.median_s), time_text(t->result.median_s),
              t->result.median_s / b->result.median_s, met(b->result.median_s <= t->result.median_s),
              time_text(b->result.median_cpu_s), time_text(t->result.median_cpu_s),
              t->result.median_cpu_s / b->result.median_cpu_s,
              met(b->result.median_cpu_s <= t->result.median_cpu_s)));
          out.push_back(fmt::format("{} at T={}: {:.1f} GFLOP/s (CPU time)", label, at,
                                    t->result.flops / t->result.median_cpu_s / 1e9));
        } else if (b) {
          out.push_back(fmt::format("{} not measured ({})", label, target.missing));
        }
        break;
      }
      case Target::Kind::within: {
        const Point* o = find_point(points, label, at);
        if (b && o) {
          const double f = target.factor;
          out.push_back(fmt::format("target {} <= {:g} x {} at T={}: wall {:.2f}x: {}; CPU {:.2f}x: {}", label, f,
                                    sw.baseline, at, o->result.median_s / b->result.median_s,
                                    met(o->result.median_s <= f * b->result.median_s),
                                    o->result.median_cpu_s / b->result.median_cpu_s,
                                    met(o->result.median_cpu_s <= f * b->result.median_cpu_s)));
        }
        break;
      }
      case Target::Kind::linear_memory:
        out.push_back(fmt::format("{} peak memory grows as {} (target: linear)", label,
                                  slope_text(growth(curve(points, label, Measure::memory)))));
        break;
      case Target::Kind::linear_band: {
        // The subject and its window, as the series does not spell them.
        const Series* s = find_series(sw, label);
        const std::string name = !s ? label
                                 : windowed(*s)
                                     ? fmt::format("{} (window [{}, {}])", s->subject, s->window_left, s->window_right)
                                     : s->subject;
        out.push_back(fmt::format("{} CPU time grows as {}, peak memory as {} (target: about linear)", name,
                                  slope_text(growth(curve(points, label, Measure::cpu))),
                                  slope_text(growth(curve(points, label, Measure::memory)))));
        break;
      }
    }
  }
}

}  // namespace

const Point* find_point(const std::vector<Point>& points, const std::string& label, int64_t seq) {
  for (const auto& p : points)
    if (p.spec.label == label && p.spec.seq == seq && p.result.status == "ok") return &p;
  return nullptr;
}

std::vector<std::pair<double, double>> curve(const std::vector<Point>& points, const std::string& label,
                                             Measure measure) {
  std::vector<std::pair<double, double>> out;
  for (const auto& p : points) {
    if (p.spec.label != label || p.result.status != "ok") continue;
    const double y = measure == Measure::memory
                         ? (p.result.peak_bytes ? static_cast<double>(*p.result.peak_bytes) : 0)
                     : measure == Measure::cpu ? p.result.median_cpu_s
                                               : p.result.median_s;
    out.emplace_back(static_cast<double>(p.spec.seq), y);
  }
  return out;
}

std::vector<std::string> read_sweep(const Sweep& sw, const std::vector<Point>& points, const Machine& m) {
  std::vector<std::string> out;
  switch (sw.reading) {
    case Reading::speedup: read_speedup(sw, points, out); break;
    case Reading::window: read_window(sw, points, out); break;
    case Reading::heads: read_heads(sw, points, out); break;
    case Reading::gru: read_gru(sw, points, out); break;
    case Reading::targets: read_targets(sw, points, m, out); break;
    case Reading::none: break;
  }
  return out;
}

}  // namespace attncheck::bench
