#pragma once
// The attncheck command line as a function, for main() and the fuzz targets.

namespace attncheck::cli {

/// Parses argv and runs the subcommand; returns the exit code of SPEC 5.2
/// (0 ok, 1 a property failed, 2 bad input, 3 interrupted). Bad input is
/// reported on stderr in one line, never thrown.
int run_cli(int argc, char** argv);

}  // namespace attncheck::cli
