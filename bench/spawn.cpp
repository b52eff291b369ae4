#include "spawn.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace attncheck::bench {

PointResult run_in_child(const PointSpec& spec, const std::filesystem::path& dir, int index, double timeout_s) {
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
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.status = "timeout";
      r.message = fmt::format("no result within --timeout {} s", timeout_s);
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

}  // namespace attncheck::bench
