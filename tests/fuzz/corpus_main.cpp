// fuzz_corpus TARGET FILE-or-DIR...: runs each file (directories
// recursively, in sorted order) once through a fuzz target, without
// libFuzzer. The kept corpus of tests/fuzz/corpus/ is a regression test in
// every build this way; a broken contract aborts (fuzz_target.h).

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  using attncheck::fuzz::find_target;
  const attncheck::fuzz::Target* target = argc >= 2 ? find_target(argv[1]) : nullptr;
  if (!target) {
    std::fprintf(stderr, "usage: fuzz_corpus TARGET FILE-or-DIR...; targets:");
    for (const auto& name : attncheck::fuzz::target_names())
      std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    const fs::path p = fs::absolute(argv[i]);  // before the target changes directory
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz_corpus: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_corpus: no input files\n");
    return 2;
  }
  target->init();
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "fuzz_corpus %s: %s\n", target->name, file.c_str());
    target->run(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::fprintf(stderr, "fuzz_corpus %s: %zu inputs, every contract held\n", target->name,
               files.size());
  return 0;
}
