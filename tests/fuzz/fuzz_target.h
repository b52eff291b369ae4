#pragma once
// The fuzz targets of tests/fuzz/: each file registers one target (a name,
// an init run once, a function run per input). The same sources build two
// ways (tests/fuzz/fuzz.cmake):
//   fuzz_NAME     one libFuzzer executable per target (ATTNCHECK_FUZZ=ON,
//                 clang): libfuzzer_main.cpp picks the target by name;
//   fuzz_corpus   every target in one plain executable, in every build:
//                 `fuzz_corpus NAME FILE-or-DIR...` runs each file once, so
//                 the kept corpus (reproducers of fixed bugs included) is a
//                 regression test without libFuzzer.
// A target checks the contract itself and calls fail() when it is broken;
// a crash, a sanitizer report or an uncaught exception fails it as well.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::fuzz {

struct Target {
  const char* name;
  void (*init)();                            // once, before any input
  void (*run)(const uint8_t* data, size_t size);  // per input
};

/// Registers a target (from a static initializer).
bool register_target(const Target& target);

/// The registered target of this name, or nullptr.
const Target* find_target(std::string_view name);

/// Names of all registered targets.
std::vector<std::string> target_names();

/// Reports a broken contract on stderr and aborts, so libFuzzer keeps the
/// input as a crash and the corpus runner fails.
[[noreturn]] void fail(const std::string& what);

/// Checks an error message against SPEC 5.2: one line, naming `name` (the
/// file or argument). `message` excludes the trailing newline.
void expect_one_line_naming(const std::string& message, std::string_view name,
                            std::string_view context);

// ---- The command line, driven in-process (cli/commands.h) ----

/// Makes a fresh scratch directory, makes it the working directory (so
/// relative paths the CLI reads and writes stay inside it) and sends stdout
/// to /dev/null. Removed at exit.
void enter_scratch_directory();

/// Empties the scratch directory (the state one input left must not change
/// what the next one does).
void clear_scratch_directory();

/// Writes a file in the scratch directory (a relative path).
void write_file(const std::string& path, std::string_view text);

struct CliResult {
  int code = 0;
  std::string err;  ///< what the CLI wrote to std::cerr
};

/// run_cli("attncheck", args...), capturing std::cerr. Checks SPEC 5.2's
/// exit codes: 0, 1 or 2 (never 3: nothing interrupts), and for 2 one line
/// on stderr that is not an internal error.
CliResult run_cli(const std::vector<std::string>& args);

}  // namespace attncheck::fuzz

#define ATTNCHECK_FUZZ_CONCAT2(a, b) a##b
#define ATTNCHECK_FUZZ_CONCAT(a, b) ATTNCHECK_FUZZ_CONCAT2(a, b)
/// ATTNCHECK_FUZZ_TARGET(name, init, run): registers a target.
#define ATTNCHECK_FUZZ_TARGET(name, init, run)                                 \
  static const bool ATTNCHECK_FUZZ_CONCAT(attncheck_fuzz_registered_, __LINE__) = \
      ::attncheck::fuzz::register_target({name, init, run})
