// The harness's side of a worker process (host/supervisor.h): spawning,
// the time limits of a call, telling deaths apart, reaping; and loading a
// file in a describe worker.

#include "host/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string_view>

#include "core/cancel.h"
#include "attncheck/error.h"
#include "host/wire.h"
#include "host/worker.h"

namespace attncheck {
namespace {

std::atomic<int> workers_alive{0};

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* text = strsignal(sig);
  return fmt::format("signal {} (SIG{}: {})", sig, abbrev ? abbrev : "?", text ? text : "?");
}

// How the worker ended, from its wait status.
std::string how_it_ended(int status) {
  return WIFSIGNALED(status)
             ? "crashed with " + signal_text(WTERMSIG(status))
             : fmt::format("exited with status {} (an implementation must return, not exit)",
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace

namespace host_detail {

void WorkerProcess::start(const std::string& mode, const std::string& name,
                          const std::string& path, const WorkerCommand* command) {
  std::string exe;
  if (command) {
    exe = command->program;
  } else {
    if (!program_calls_worker_main()) {
      throw std::logic_error("isolate: this program's main() does not call "
                             "attncheck::worker_main (host/isolation.h)");
    }
    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) throw std::runtime_error("isolation: cannot read /proc/self/exe");
    self[len] = '\0';
    exe = self;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error(fmt::format("isolation: socketpair: {}", std::strerror(errno)));
  }
  // dup2 onto kWorkerFd clears close-on-exec, unless the end already is
  // that descriptor: then it is moved out of the way first.
  if (sv[1] == kWorkerFd) {
    const int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, kWorkerFd + 1);
    ::close(sv[1]);
    sv[1] = moved;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], kWorkerFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string parent = std::to_string(::getpid());
  std::vector<std::string> args = {exe};
  if (command) args.insert(args.end(), command->args.begin(), command->args.end());
  args.insert(args.end(), {kWorkerFlag, parent, mode, name, path});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // This process's environment, with the command's assignments replacing
  // variables of the same name.
  std::vector<std::string> env = command ? command->env : std::vector<std::string>{};
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  for (char** e = environ; *e; ++e) {
    const std::string_view var(*e);
    const auto named = [&](const std::string& set) {
      const size_t eq = set.find('=');
      return var.size() > eq && var.substr(0, eq + 1) == std::string_view(set).substr(0, eq + 1);
    };
    if (std::none_of(env.begin(), env.end(), named)) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  // Everything buffered goes out first, so no output is lost in a crash.
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = -1;
  // A command's program may be a bare name ("python3"), looked up in PATH.
  const int rc =
      command ? ::posix_spawnp(&pid, exe.c_str(), &actions, &attr, argv.data(), envp.data())
              : ::posix_spawn(&pid, exe.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    throw std::runtime_error(fmt::format("isolation: posix_spawn: {}", std::strerror(rc)));
  }
  fd_ = sv[0];
  pid_ = pid;
  ++workers_alive;
  if (::clock_getcpuclockid(pid_, &cpu_clock_) != 0) cpu_clock_ = -1;
}

void WorkerProcess::stop() {
  if (pid_ <= 0) return;
  ::close(fd_);
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  forget();
}

std::string WorkerProcess::reap() {
  int status = 0;
  ::close(fd_);
  ::waitpid(pid_, &status, 0);
  ::kill(-pid_, SIGKILL);
  forget();
  return how_it_ended(status);
}

double WorkerProcess::cpu_ms() const {
  timespec ts{};
  if (cpu_clock_ == clockid_t(-1) || ::clock_gettime(cpu_clock_, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

void WorkerProcess::forget() {
  pid_ = -1;
  fd_ = -1;
  cpu_clock_ = clockid_t(-1);
  --workers_alive;
}

std::variant<std::string, Death> exchange(WorkerProcess& worker, const std::string* request,
                                          CallLimits limits, const char* what) {
  double cpu_start = worker.cpu_ms();
  auto wall_start = std::chrono::steady_clock::now();
  const auto died = [&]() -> Death {
    return {Death::Kind::died,
            fmt::format("the implementation {} during {} (it ran in a worker process; the next "
                        "call starts a fresh one)",
                        worker.reap(), what)};
  };
  const auto hung = [&](const std::string& why) -> Death {
    worker.stop();
    return {Death::Kind::hung, fmt::format("{} did not return: {}; the worker process was killed "
                                           "(a hang, or raise --timeout-ms)",
                                           what, why)};
  };
  if (request && !send_frame(worker.fd(), *request)) return died();
  // A request's limits count from the worker's "received": reading and
  // decoding a real-size problem (a gigabyte of first-touched memory,
  // seconds of CPU on some machines) is not the implementation's time.
  // Until then the worker runs only the wire's decoding, which ends (or
  // it dies, or the user interrupts: both end the wait too).
  bool running = request == nullptr;
  std::string buf;
  std::vector<char> chunk(1 << 16);
  for (;;) {
    if (cancel_requested()) {
      worker.stop();
      return Death{Death::Kind::cancelled, "interrupted"};
    }
    pollfd pfd{worker.fd(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 20);
    if (ready > 0) {
      const ssize_t k = ::read(worker.fd(), chunk.data(), chunk.size());
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return died();
      buf.append(chunk.data(), static_cast<size_t>(k));
      // The frames in buf: the worker's "received" (the limits restart
      // from it), then its reply, which must be the last bytes.
      while (buf.size() >= sizeof(uint64_t)) {
        uint64_t need = 0;
        std::memcpy(&need, buf.data(), sizeof need);
        if (need > kMaxFrameBytes || need < sizeof(int32_t) + 1) {
          worker.stop();
          return Death{Death::Kind::died, fmt::format("the worker sent a malformed reply during {} "
                                                      "(something in it wrote to its channel)",
                                                      what)};
        }
        need += sizeof(uint64_t);
        if (buf.size() < need) break;
        int32_t sender = 0;
        std::memcpy(&sender, buf.data() + sizeof(uint64_t), sizeof sender);
        const auto kind = static_cast<uint8_t>(buf[sizeof(uint64_t) + sizeof(int32_t)]);
        const bool received = request && kind == kReceived;
        if (sender != worker.pid() || (!received && buf.size() > need)) {
          worker.stop();
          return Death{Death::Kind::died,
                       fmt::format("a second process (pid {}) answered during {}: the "
                                   "implementation forked; the worker and its process group "
                                   "were stopped",
                                   sender, what)};
        }
        if (!received) return buf.substr(sizeof(uint64_t) + sizeof(int32_t));
        buf.erase(0, need);
        running = true;
        cpu_start = worker.cpu_ms();
        wall_start = std::chrono::steady_clock::now();
      }
    } else if (ready < 0 && errno != EINTR) {
      return died();
    }
    const double cpu = worker.cpu_ms() - cpu_start;
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start)
            .count();
    if (!running) continue;
    if (limits.cpu_ms > 0 && cpu > limits.cpu_ms) {
      return hung(fmt::format("it used more than {:.0f} ms of CPU time (--timeout-ms)",
                              limits.cpu_ms));
    }
    if (limits.wall_ms > 0 && wall > limits.wall_ms) {
      return hung(fmt::format("it took more than {:.0f} ms of wall time", limits.wall_ms));
    }
    // Blocked, not starved: a call that waits for a core on a loaded
    // machine still gets about cores / load of one, far above this share.
    if (limits.cpu_ms > 0 && wall > kWallTimeoutFactor * limits.cpu_ms &&
        cpu < kBlockedCpuShare * wall) {
      return hung(fmt::format("it was blocked for {:.0f} ms of wall time (over {} x "
                              "--timeout-ms) while using {:.0f} ms of CPU time",
                              wall, kWallTimeoutFactor, cpu));
    }
  }
}

std::vector<ImplInfo> describe_in_worker(const std::string& mode, const std::string& path,
                                         const WorkerCommand* command, IsolationOptions options) {
  if (cancel_requested()) throw Cancelled();
  const bool plugin = mode == "plugin";
  WorkerProcess worker;
  try {
    worker.start("describe", plugin ? "" : mode, path, command);
  } catch (const std::runtime_error& e) {
    if (!command) throw;
    throw InputError(fmt::format("{}: cannot start the {} worker '{}': {}", path, mode,
                                 command->program, e.what()));
  }
  const auto limit = static_cast<double>(kWallTimeoutFactor * options.timeout_ms);
  auto result = exchange(worker, nullptr, {0, limit}, "loading");
  if (auto* death = std::get_if<Death>(&result)) {
    if (death->kind == Death::Kind::cancelled) throw Cancelled();
    const std::string how =
        death->kind == Death::Kind::hung
            ? fmt::format("did not finish loading within {} ms (10 x --timeout-ms)",
                          kWallTimeoutFactor * options.timeout_ms)
            : death->message.substr(std::string("the implementation ").size(),
                                    death->message.find(" during ") -
                                        std::string("the implementation ").size());
    if (plugin) {
      throw InputError(fmt::format(
          "{}: the plugin {} while loading (in its constructors or attncheck_plugin_impls)", path,
          how));
    }
    throw InputError(fmt::format("{}: the {} worker {} while loading it", path, mode, how));
  }
  const std::string& reply = std::get<std::string>(result);
  Reader r(reply);
  const auto kind = r.get<uint8_t>();
  if (kind == kInputError) throw InputError(r.get_str());
  if (kind != kDescribed) throw std::runtime_error("isolation: unexpected reply while loading");
  std::vector<ImplInfo> infos;
  const auto n = r.get<uint64_t>();
  for (uint64_t k = 0; k < n; ++k) infos.push_back(get_info(r));
  return infos;
}

}  // namespace host_detail

int live_workers() { return workers_alive; }

}  // namespace attncheck
