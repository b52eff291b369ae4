#pragma once
// attncheck bench: controlled cost comparisons
// (exercises 6, 8, 9 and 10). The parent plans the points of each
// comparison (plan.h, presets.h), runs every point in a child process of
// its own (spawn.h; measure.h there), prints the tables grouped by length
// (table.h) and each comparison's reading (reading.h), and writes the JSON
// report (report.h) and the SVG figure (plot.h).

#include <CLI/CLI.hpp>

#include "options.h"
#include "plan.h"

namespace attncheck::bench {

/// Adds the "bench" subcommand to `app`, its options bound to `opt`, which
/// must outlive the parse and bench_command.
CLI::App* add_bench_command(CLI::App& app, BenchOptions& opt);

/// Runs the bench subcommand with the options parsed into `opt` (in a
/// child, the one point it was started for); returns the exit code.
/// --plugin and --python load in the parent and in each child through
/// load_subjects (plan.h). Throws InputError for bad options.
int bench_command(const BenchOptions& opt);

}  // namespace attncheck::bench
