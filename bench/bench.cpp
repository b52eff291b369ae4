#include "bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "host/plugin_loader.h"
#include "machine.h"
#include "measure.h"
#include "plan.h"
#include "plot.h"
#include "reading.h"
#include "report.h"
#include "spawn.h"
#include "table.h"

namespace attncheck::bench {
namespace {

// The comparison's row of the figure: time and peak memory of each series.
PlotRow plot_row(const Sweep& sw, const std::vector<Point>& points) {
  PlotRow row;
  row.title = sw.name;
  for (const auto& s : sw.series) {
    PlotSeries ps;
    ps.label = s.label;
    ps.time_s = curve(points, s.label, Measure::wall);
    ps.peak_bytes = curve(points, s.label, Measure::memory);
    row.series.push_back(ps);
  }
  return row;
}

int run_bench(const BenchOptions& opt) {
  const auto plugins = load_subjects(opt.plugins, opt.python, call_timeout_ms(opt.timeout_s));
  const std::vector<Sweep> sweeps = plan_sweeps(opt, plugins);
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
  std::vector<ReadingLine> analysis;
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
        print_group_header(group);
      }
      for (const auto& s : sw.series) {
        Point p;
        p.sweep = sw.name;
        p.spec = point_spec(sw, s, seq, opt);
        if (const std::string why = refusal(p.spec, plugins); !why.empty()) {
          p.result.status = "unsupported";
          p.result.message = why;
        } else {
          p.result = run_in_child(p.spec, dir, index++, opt.timeout_s);
        }
        print_row(p);
        std::fflush(stdout);
        mine.push_back(p);
      }
    }
    for (const auto& line : read_sweep(sw, mine, m)) {
      fmt::print("  -> {}\n", line);
      analysis.push_back({sw.name, line});
    }
    rows.push_back(plot_row(sw, mine));
    points.insert(points.end(), mine.begin(), mine.end());
  }
  std::filesystem::remove_all(dir);

  if (!opt.report.empty()) write_report(opt.report, report_json(opt, m, points, analysis));
  if (!opt.plot.empty()) {
    std::ofstream out(opt.plot);
    out << render_svg(rows);
    if (!out) throw InputError(fmt::format("--plot: cannot write '{}'", opt.plot));
  }
  return 0;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchOptions& opt) {
  CLI::App* b = app.add_subcommand(
      "bench", "time and peak memory of implementations by sequence length, each in its own process");
  b->add_option("--impl", opt.impls, "implementation to measure (repeatable)");
  b->add_option("--plugin", opt.plugins, "load this plugin; its implementations are measured unless --impl names some");
  b->add_option("--python", opt.python,
                "measure this Python file's implementations, FILE.py[:NAME] (all it declares without "
                ":NAME), each call made in a Python worker (the time includes crossing into Python)");
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

int bench_command(const BenchOptions& opt) {
  if (!opt.child_spec.empty()) return run_child(opt.child_spec, opt.child_out);
  return run_bench(opt);
}

}  // namespace attncheck::bench
