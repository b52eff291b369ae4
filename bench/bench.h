#pragma once
// attncheck bench (the bench issue): controlled cost comparisons.

#include <CLI/CLI.hpp>

namespace attncheck::cli {

/// Adds the "bench" subcommand and its options to `app`; the parsed options
/// are kept in bench.cpp for bench_command.
CLI::App* add_bench_command(CLI::App& app);

/// Runs the bench subcommand with the options parsed into add_bench_command's
/// subcommand; returns the exit code.
int bench_command();

}  // namespace attncheck::cli
