// The target registry and the in-process command line of fuzz_target.h.

#include "fuzz_target.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>

#include "cli/commands.h"

namespace attncheck::fuzz {
namespace {

std::vector<Target>& registry() {
  static std::vector<Target> targets;
  return targets;
}

std::filesystem::path& scratch() {
  static std::filesystem::path dir;
  return dir;
}

void remove_scratch() {
  if (scratch().empty()) return;
  std::error_code ec;
  std::filesystem::current_path(scratch().parent_path(), ec);
  std::filesystem::remove_all(scratch(), ec);
}

}  // namespace

bool register_target(const Target& target) {
  registry().push_back(target);
  return true;
}

const Target* find_target(std::string_view name) {
  for (const Target& t : registry())
    if (name == t.name) return &t;
  return nullptr;
}

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (const Target& t : registry()) names.emplace_back(t.name);
  return names;
}

void fail(const std::string& what) {
  std::fprintf(stderr, "\nattncheck fuzz: contract broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void expect_one_line_naming(const std::string& message, std::string_view name,
                            std::string_view context) {
  const auto show = [&] {
    return std::string(context) + ": message \"" + message + "\"";
  };
  if (message.empty()) fail(show() + " is empty");
  if (message.find('\n') != std::string::npos ||
      message.find('\r') != std::string::npos) {
    fail(show() + " is more than one line");
  }
  if (message.find(name) == std::string::npos) {
    fail(show() + " does not name '" + std::string(name) + "'");
  }
}

void enter_scratch_directory() {
  std::string templ =
      (std::filesystem::temp_directory_path() / "attncheck-fuzz-XXXXXX").string();
  if (!mkdtemp(templ.data())) fail("cannot make a scratch directory");
  scratch() = templ;
  std::filesystem::current_path(scratch());
  std::atexit(remove_scratch);
  // The CLI prints results on stdout: not wanted thousands of times a
  // second. stderr stays: the sanitizers and libFuzzer report there.
  const int null = open("/dev/null", O_WRONLY);
  if (null < 0 || dup2(null, STDOUT_FILENO) < 0) fail("cannot redirect stdout");
  close(null);
}

void clear_scratch_directory() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(scratch(), ec)) {
    std::filesystem::remove_all(entry.path(), ec);
  }
}

void write_file(const std::string& path, std::string_view text) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) fail("cannot write " + path);
}

CliResult run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> storage{"attncheck"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  std::ostringstream err;
  std::streambuf* const saved = std::cerr.rdbuf(err.rdbuf());
  CliResult r;
  try {
    r.code = attncheck::cli::run_cli(static_cast<int>(storage.size()), argv.data());
  } catch (...) {
    std::cerr.rdbuf(saved);
    throw;  // run_cli must not throw: let the fuzzer report it
  }
  std::cerr.rdbuf(saved);
  std::fflush(stdout);
  r.err = err.str();

  std::string line;
  for (size_t i = 1; i < storage.size(); ++i) line += " " + storage[i];
  const std::string context = "attncheck" + line;
  if (r.code < 0 || r.code > 2) {
    fail(context + ": exit code " + std::to_string(r.code) + " (expected 0, 1 or 2)");
  }
  if (r.code == 2) {
    if (r.err.empty() || r.err.back() != '\n') {
      fail(context + ": exit 2 without a line on stderr: \"" + r.err + "\"");
    }
    const std::string message = r.err.substr(0, r.err.size() - 1);
    expect_one_line_naming(message, "attncheck: ", context);
    if (message.rfind("attncheck: internal error", 0) == 0) {
      fail(context + ": an internal error is not an input error: \"" + message + "\"");
    }
  }
  return r;
}

}  // namespace attncheck::fuzz
