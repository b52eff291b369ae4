// The harness's side of a worker process (host/supervisor.h): spawning,
// the time limits of a call, telling deaths apart, reaping; and loading a
// file in a describe worker.

#include "host/supervisor.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
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
#include <optional>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "core/cancel.h"
#include "attncheck/dtype.h"
#include "core/text.h"
#include "host/process_tree.h"
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

int64_t worker_memory_limit_mb(int64_t option) {
  if (option != kMemoryLimitHalfOfMachine) return std::max<int64_t>(option, 0);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<int64_t>(pages) * page / 2 / (int64_t{1} << 20);
}

void WorkerProcess::start(const std::string& mode, const std::string& name,
                          const std::string& path, const WorkerCommand* command,
                          int64_t memory_limit_mb) {
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
  // Orphans below a relay killed by its own kernel come back to this
  // process, to be found and killed (process_tree.h); a signal from a
  // worker's tree fails that worker's call instead of ending the run; and
  // no worker, root or not (its capabilities are dropped), may open this
  // process's /proc files (its descriptors, its memory) or ptrace it.
  become_subreaper();
  static const bool once = [] {
    set_signal_sender_check(&blame_signal);
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    return true;
  }();
  (void)once;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error(fmt::format("isolation: socketpair: {}", std::strerror(errno)));
  }
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    throw std::runtime_error(fmt::format("isolation: pipe: {}", std::strerror(err)));
  }
  // dup2 onto kWorkerFd clears close-on-exec, unless the end already is
  // that descriptor: then it is moved out of the way first. The same for
  // the output pipe and descriptors 1 and 2.
  if (sv[1] == kWorkerFd) {
    const int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, kWorkerFd + 1);
    ::close(sv[1]);
    sv[1] = moved;
  }
  if (out[1] <= 2 || out[1] == kWorkerFd) {
    const int moved = ::fcntl(out[1], F_DUPFD_CLOEXEC, kWorkerFd + 1);
    ::close(out[1]);
    out[1] = moved;
  }
  ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_adddup2(&actions, sv[1], kWorkerFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGUSR1, SIGUSR2, SIGTTOU, SIGTTIN,
                  SIGTSTP})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // A session of its own, so also a process group of its own (stop() kills
  // the group), and no controlling terminal.
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string parent = std::to_string(::getpid());
  std::vector<std::string> args = {exe};
  if (command) args.insert(args.end(), command->args.begin(), command->args.end());
  args.insert(args.end(), {kWorkerFlag, parent, mode, name, path});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // This process's environment, with the command's assignments and the
  // worker's own (its token, its memory limit) replacing variables of the
  // same name.
  token_ = new_worker_token();
  std::vector<std::string> env = command ? command->env : std::vector<std::string>{};
  env.push_back(fmt::format("{}={}", kWorkerTokenVar, token_));
  env.push_back(fmt::format("{}={}", kWorkerMemoryVar, memory_limit_mb));
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
  ::close(out[1]);
  if (rc != 0) {
    ::close(sv[0]);
    ::close(out[0]);
    throw std::runtime_error(fmt::format("isolation: posix_spawn: {}", std::strerror(rc)));
  }
  fd_ = sv[0];
  out_fd_ = out[0];
  pid_ = pid;
  kernel_ = pid;
  sender_pid_ = pid;
  init_ = -1;
  placed_ = false;
  kernel_exe_.clear();
  note_worker(pid_, pid_);
  memory_limit_mb_ = memory_limit_mb;
  output_.clear();
  output_bytes_ = 0;
  ++workers_alive;
  if (::clock_getcpuclockid(pid_, &cpu_clock_) != 0) cpu_clock_ = -1;
}

size_t WorkerProcess::end_tree(bool exited, int* status, rusage* usage) {
  // In a PID namespace: its init killed, everything in it dies (the init
  // exits once all of it is gone), then the relay. Outside one: what the
  // kernel started first, while the relay still holds it in its tree; then
  // the worker's group, the relay (unless it exited and was waited for
  // already), and what the relay's death handed to this process.
  const std::string token = init_ > 0 ? std::string() : token_;
  std::vector<pid_t> left = descendants();
  if (init_ > 0) ::kill(init_, SIGKILL);
  for (const pid_t p : kill_worker_descendants(roots(), {}, token)) left.push_back(p);
  ::kill(-pid_, SIGKILL);
  if (!exited) {
    ::kill(pid_, SIGKILL);
    ::wait4(pid_, status, 0, usage);
  }
  if (init_ > 0) {
    reap_adopted({init_});
    note_worker(init_, 0);
  } else {
    for (const pid_t p : kill_worker_descendants({pid_}, {}, token)) left.push_back(p);
  }
  reap_adopted(left);
  std::sort(left.begin(), left.end());
  left.erase(std::unique(left.begin(), left.end()), left.end());
  left.erase(std::remove(left.begin(), left.end(), kernel_), left.end());
  return left.size();
}

std::vector<pid_t> WorkerProcess::roots() const {
  std::vector<pid_t> r = {pid_};
  if (init_ > 0) r.push_back(init_);
  return r;
}

void WorkerProcess::place(uint8_t kind, Reader& r) {
  if (kind != kContained && kind != kUncontained) {
    throw WireError("the worker's first message was not its relay's");
  }
  const auto pid_of = [&r] {
    const auto p = r.get<int32_t>();
    if (p <= 0) throw WireError(fmt::format("a process id of {}", p));
    return static_cast<pid_t>(p);
  };
  if (kind == kContained) {
    init_ = pid_of();
    kernel_ = pid_of();
    sender_pid_ = pid_of();
    note_worker(init_, pid_);
  } else {
    kernel_ = pid_of();
    sender_pid_ = kernel_;
    const std::string why = r.get_str();
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      fmt::print(stderr,
                 "note: workers run without a PID namespace of their own here ({}): what an "
                 "implementation starts is found by its worker's process tree, and is not "
                 "contained if it kills its worker's relay (docs/isolation.md)\n",
                 printable(why, 200));
    }
  }
  r.expect_end();
  note_worker(kernel_, pid_);
  placed_ = true;
  kernel_exe_ = exe_of(kernel_);
  if (::clock_getcpuclockid(kernel_, &cpu_clock_) != 0) cpu_clock_ = -1;
}

double WorkerProcess::memory_mb() const {
  if (pid_ <= 0 || !placed_) return 0;
  std::vector<pid_t> tree = worker_descendants(roots(), {}, "");
  tree.erase(std::remove(tree.begin(), tree.end(), init_), tree.end());
  return static_cast<double>(resident_bytes(tree)) / double(1 << 20);
}

std::string WorkerProcess::replaced_program() const {
  if (!placed_ || kernel_exe_.empty()) return {};
  const std::string now = exe_of(kernel_);
  return !now.empty() && now != kernel_exe_ ? now : std::string();
}

int WorkerProcess::stop() {
  if (pid_ <= 0) return 0;
  ::close(fd_);
  fd_ = -1;
  const size_t left = end_tree(false, nullptr, nullptr);
  forget();
  return static_cast<int>(left);
}

std::string WorkerProcess::reap() {
  ::close(fd_);
  fd_ = -1;
  last_signal_ = 0;
  int status = 0;
  rusage usage{};
  bool exited = false;
  // A worker whose implementation closed the channel may still be
  // running: it gets kReapWaitMs to exit of itself.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReapWaitMs);
  for (;;) {
    const pid_t r = ::wait4(pid_, &status, WNOHANG, &usage);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      exited = r == pid_;
      break;
    }
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  drain_output();
  end_tree(exited, &status, &usage);
  const int64_t limit = memory_limit_mb_;
  forget();
  if (!exited) {
    return fmt::format("closed the worker's channel to the harness and did not exit within "
                       "{} ms",
                       kReapWaitMs);
  }
  last_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::string how;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChannelLostExit) {
    how = "closed the worker's channel to the harness (file descriptor 3)";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == kChannelReplacedExit) {
    how = "replaced the worker's channel to the harness (file descriptor 3) with another file";
  } else {
    how = how_it_ended(status);
  }
  // Peak resident memory near the limit: the allocation that failed there
  // is the likely cause of the crash. "Near": the allocation that failed
  // was refused whole, so up to its size of the limit stays unused;
  // allocations of up to a quarter of the limit are named (the worker keeps
  // glibc's small top pad under a limit, worker.cpp, so resident memory
  // follows what the limit counts: 16 MiB blocks under 128 MiB peak at
  // 119 MiB). Caveat: Linux carries the high-water mark of the address
  // space a process execs from into its ru_maxrss, and posix_spawn's child
  // shares the harness's until its exec, so the peak is at least the
  // harness's own at the spawn (LibTorch's pages, while the harness loaded
  // it at every start, hid that the worker's 64 MiB pad broke this).
  const double peak_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
  if (limit > 0 && WIFSIGNALED(status) && peak_mb >= 0.75 * static_cast<double>(limit)) {
    how += fmt::format(" at {:.0f} MiB of memory, its limit being {} MiB (--memory-limit-mb)",
                       peak_mb, limit);
  }
  return how;
}

double WorkerProcess::cpu_ms() const {
  timespec ts{};
  if (cpu_clock_ == clockid_t(-1) || ::clock_gettime(cpu_clock_, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

void WorkerProcess::drain_output() {
  if (out_fd_ < 0) return;
  char buf[1 << 14];
  for (;;) {
    const ssize_t k = ::read(out_fd_, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    output_bytes_ += static_cast<uint64_t>(k);
    if (output_.size() < kOutputKept) {
      output_.append(buf, std::min(static_cast<size_t>(k), kOutputKept - output_.size()));
    }
  }
}

std::string WorkerProcess::take_output() {
  drain_output();
  std::string clause;
  if (output_bytes_ > 0) {
    clause = fmt::format("; it wrote {} byte{} to stdout/stderr: \"{}\"", output_bytes_,
                         output_bytes_ == 1 ? "" : "s", printable(output_, 200));
  }
  output_.clear();
  output_bytes_ = 0;
  return clause;
}

std::vector<pid_t> WorkerProcess::descendants() const {
  if (pid_ <= 0) return {};
  // Below the relay and the init, but the kernel process and the init;
  // outside a namespace also the orphans that came to this process.
  return worker_descendants(roots(), {kernel_, init_}, init_ > 0 ? std::string() : token_);
}

void WorkerProcess::forget() {
  note_worker(pid_, 0);
  note_worker(kernel_, 0);
  if (init_ > 0) note_worker(init_, 0);
  init_ = kernel_ = sender_pid_ = -1;
  placed_ = false;
  if (fd_ >= 0) ::close(fd_);
  if (out_fd_ >= 0) ::close(out_fd_);
  pid_ = -1;
  fd_ = -1;
  out_fd_ = -1;
  cpu_clock_ = clockid_t(-1);
  --workers_alive;
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// How often a call's memory is measured (the watchdog of --memory-limit-mb).
constexpr double kMemoryCheckMs = 10;

// One exchange of exchange(): the ways it ends, and the checks made while
// it waits.
class Exchange {
 public:
  Exchange(WorkerProcess& worker, const char* what) : worker_(worker), what_(what) {}

  Death died() {
    if (Death d; exec_death(d)) return d;
    const std::string how = worker_.reap();
    return {Death::Kind::died,
            fmt::format("the implementation {} during {} (it ran in a worker process; the next "
                        "call starts a fresh one){}",
                        how, what_, worker_.take_output()),
            worker_.last_signal()};
  }
  Death stopped(Death::Kind kind, const std::string& message) {
    std::string output = worker_.take_output();
    worker_.stop();
    return {kind, message + output};
  }
  Death hung(const std::string& why, const std::string& partial) {
    if (Death d; exec_death(d)) return d;
    // A frame that began and never ended is what was written, not a hang.
    if (!partial.empty()) {
      return malformed(fmt::format("a frame cut short: {} byte{} of it, then nothing",
                                   partial.size(), partial.size() == 1 ? "" : "s"));
    }
    return stopped(Death::Kind::hung,
                   fmt::format("{} did not return: {}; the worker process was killed "
                               "(a hang, or raise --timeout-ms)",
                               what_, why));
  }
  Death malformed(const std::string& why) {
    return stopped(Death::Kind::died,
                   fmt::format("the worker sent a malformed reply during {} ({}; something in "
                               "it wrote to its channel)",
                               what_, why));
  }

  // What the worker did that ends the call while it waits: a signal its
  // tree sent to the harness, memory past its limit.
  std::optional<Death> misdeed() {
    cancel_requested();  // resolves the signals received so far
    if (const int sig = take_blamed_signal(worker_.pid())) {
      const char* abbrev = sigabbrev_np(sig);
      return stopped(Death::Kind::died,
                     fmt::format("the implementation sent SIG{} (signal {}) to the harness during "
                                 "{} (a signal from a worker never ends the run); the worker and "
                                 "every process it started were killed",
                                 abbrev ? abbrev : "?", sig, what_));
    }
    const int64_t limit = worker_.memory_limit_mb();
    if (limit <= 0 || kSanitizedBuild || ms_since(memory_checked_) < kMemoryCheckMs) return {};
    memory_checked_ = Clock::now();
    if (const double mb = worker_.memory_mb(); mb > static_cast<double>(limit)) {
      return stopped(Death::Kind::died,
                     fmt::format("the implementation used {:.0f} MiB of memory during {}, its "
                                 "limit being {} MiB (--memory-limit-mb: resident anonymous and "
                                 "shared memory of the worker and every process it started); "
                                 "the worker was killed",
                                 mb, what_, limit));
    }
    return {};
  }

  // A call must not begin with bytes already in the channel: written
  // between calls (a thread of the implementation), they would be read as
  // this call's answer.
  std::optional<Death> written_between_calls() {
    char probe[64];
    const ssize_t k = ::recv(worker_.fd(), probe, sizeof probe, MSG_DONTWAIT | MSG_PEEK);
    if (k <= 0) return {};
    return malformed(fmt::format("bytes written to the channel between calls, before {} was "
                                 "sent",
                                 what_));
  }

 private:
  bool exec_death(Death& d) {
    const std::string program = worker_.replaced_program();
    if (program.empty()) return false;
    d = stopped(Death::Kind::died,
                fmt::format("the implementation replaced the worker's program with {} (execve) "
                            "during {}; the worker and every process it started were killed",
                            printable(program, 200), what_));
    return true;
  }

  WorkerProcess& worker_;
  const char* what_;
  Clock::time_point memory_checked_{};
};

// A call's id (host/wire.h): random and never 0, the id of what is sent
// without a request. One generator per thread: the Python binding calls
// from several.
uint64_t new_call_id() {
  thread_local std::mt19937_64 draw{(uint64_t{std::random_device{}()} << 32) ^
                                    std::random_device{}()};
  uint64_t id = 0;
  while (id == 0) id = draw();
  return id;
}

}  // namespace

std::variant<std::string, Death> exchange(WorkerProcess& worker, const Writer* request,
                                          CallLimits limits, const char* what,
                                          uint64_t max_reply) {
  if (max_reply == 0 || max_reply > kMaxFrameBytes) max_reply = kMaxFrameBytes;
  Exchange x(worker, what);
  worker.drain_output();
  worker.take_output();  // what it wrote between calls is not this call's
  if (request) {
    if (auto d = x.written_between_calls()) return *d;
  }
  // Phase one, request sent and acknowledged: a bound of its own that no
  // message moves. Reading and decoding a real-size problem (a gigabyte of
  // first-touched memory, seconds of CPU on some machines) is not the
  // implementation's time, so its limits count from the worker's
  // "received". Without a request the limits count from now.
  const double cpu_bound = limits.cpu_ms > 0 ? limits.cpu_ms : limits.wall_ms;
  const double pre_ms =
      kWallTimeoutFactor * cpu_bound +
      (request ? static_cast<double>(request->size()) / kSlowestDecodeBytesPerMs : 0.0);
  const auto pre_start = Clock::now();
  bool running = request == nullptr;
  double cpu_start = worker.cpu_ms();
  auto wall_start = Clock::now();
  // The frame to send: its length and the call's id, then the payload
  // where it is (no copy: a request can be a gigabyte).
  const uint64_t id = request ? new_call_id() : 0;
  const uint64_t head[2] = {request ? request->size() + kCallIdBytes : 0, id};
  size_t sent = 0;
  const size_t to_send = request ? sizeof head + request->size() : 0;
  std::string buf;
  std::vector<char> chunk(1 << 16);
  for (;;) {
    if (cancel_requested()) {
      worker.stop();
      return Death{Death::Kind::cancelled, "interrupted"};
    }
    if (auto d = x.misdeed()) return *d;
    if (!running && ms_since(pre_start) > pre_ms) {
      return x.hung(fmt::format("the worker did not take the request within {:.0f} ms (it was "
                                "stopped, blocked or busy between calls)",
                                pre_ms),
                    buf);
    }
    pollfd pfd[2] = {{worker.fd(), static_cast<short>(POLLIN | (sent < to_send ? POLLOUT : 0)), 0},
                     {worker.output_fd(), POLLIN, 0}};
    const int ready = ::poll(pfd, 2, 20);
    if (ready < 0 && errno != EINTR) return x.died();
    if (ready > 0 && (pfd[1].revents & (POLLIN | POLLHUP))) worker.drain_output();
    if (ready > 0 && sent < to_send && (pfd[0].revents & POLLOUT)) {
      const char* const h = reinterpret_cast<const char*>(head);
      const auto [from, n] = sent < sizeof head ? std::pair(h + sent, sizeof head - sent)
                                                : request->run_at(sent - sizeof head);
      const ssize_t k = ::send(worker.fd(), from, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += static_cast<size_t>(k);
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return x.died();
      }
    }
    if (ready > 0 && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t k = ::read(worker.fd(), chunk.data(), chunk.size());
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) return x.died();
      buf.append(chunk.data(), static_cast<size_t>(k));
      // The frames in buf: the relay's first message (once, at start-up),
      // the worker's "received" (once, after the whole request), then its
      // reply, which must be the last bytes.
      constexpr size_t kHead = kReplyHead;
      while (buf.size() >= sizeof(uint64_t)) {
        uint64_t need = 0;
        std::memcpy(&need, buf.data(), sizeof need);
        if (need <= kHead - sizeof(uint64_t)) return x.malformed("a frame too short to be a reply");
        if (need > max_reply + kHead - sizeof(uint64_t)) {
          return x.malformed(fmt::format(
              "a reply of {} bytes, more than the call can produce ({})", need, max_reply));
        }
        need += sizeof(uint64_t);
        if (buf.size() < need) break;
        int32_t sender = 0;
        std::memcpy(&sender, buf.data() + sizeof(uint64_t), sizeof sender);
        uint64_t answers = 0;
        std::memcpy(&answers, buf.data() + sizeof(uint64_t) + sizeof sender, sizeof answers);
        const auto kind = static_cast<uint8_t>(buf[kHead]);
        if (!worker.placed()) {
          const std::string body = buf.substr(kHead + 1, need - kHead - 1);
          try {
            if (sender != worker.pid()) throw WireError("a message before the relay's");
            Reader r(body);
            worker.place(kind, r);
          } catch (const std::exception& e) {
            return x.malformed(e.what());
          }
          buf.erase(0, need);
          continue;
        }
        const bool received = kind == kReceived;
        if (sender == worker.sender_pid() && !received && buf.size() > need) {
          return x.malformed("more than one reply to one request");
        }
        if (sender != worker.sender_pid()) {
          return x.stopped(Death::Kind::died,
                           fmt::format("a second process (pid {}) answered during {}: the "
                                       "implementation forked; the worker and every process it "
                                       "started were stopped",
                                       sender, what));
        }
        if (answers != id) {
          return x.malformed(fmt::format("a {} of call {:#x}, not of this call ({:#x}): forged "
                                         "or held back",
                                         received ? "\"received\"" : "reply", answers, id));
        }
        if (received && (running || sent < to_send)) {
          return x.malformed(running ? "a second \"received\""
                                     : "\"received\" before the request");
        }
        if (!received) {
          if (!running) return x.malformed("a reply before the worker took the request");
          if (auto d = x.misdeed()) return *d;
          return buf.substr(kHead);
        }
        buf.erase(0, need);
        running = true;
        cpu_start = worker.cpu_ms();
        wall_start = Clock::now();
      }
    }
    if (!running) continue;
    const double cpu = worker.cpu_ms() - cpu_start;
    const double wall = ms_since(wall_start);
    if (limits.cpu_ms > 0 && cpu > limits.cpu_ms) {
      return x.hung(fmt::format("it used more than {:.0f} ms of CPU time (--timeout-ms)",
                                limits.cpu_ms),
                    buf);
    }
    if (limits.wall_ms > 0 && wall > limits.wall_ms) {
      return x.hung(fmt::format("it took more than {:.0f} ms of wall time", limits.wall_ms), buf);
    }
    // Blocked, not starved: a call that waits for a core on a loaded
    // machine still gets about cores / load of one, far above this share.
    if (limits.cpu_ms > 0 && wall > kWallTimeoutFactor * limits.cpu_ms &&
        cpu < kBlockedCpuShare * wall) {
      return x.hung(fmt::format("it was blocked for {:.0f} ms of wall time (over {} x "
                                "--timeout-ms) while using {:.0f} ms of CPU time",
                                wall, kWallTimeoutFactor, cpu),
                    buf);
    }
  }
}

std::vector<ImplInfo> describe_in_worker(const std::string& mode, const std::string& path,
                                         const WorkerCommand* command, IsolationOptions options) {
  if (cancel_requested()) throw Cancelled();
  const bool plugin = mode == "plugin";
  WorkerProcess worker;
  try {
    worker.start("describe", plugin ? "" : mode, path, command,
                 worker_memory_limit_mb(options.memory_limit_mb));
  } catch (const std::runtime_error& e) {
    if (!command) throw;
    throw InputError(fmt::format("{}: cannot start the {} worker '{}': {}", path, mode,
                                 command->program, e.what()));
  }
  const auto limit = static_cast<double>(kWallTimeoutFactor * options.timeout_ms);
  auto result = exchange(worker, nullptr, {0, limit}, "loading", kMaxDescribeReplyBytes);
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
  // A process the file's code started while loading (a constructor that
  // forks a helper, a daemon) must not outlive the harness: killed, and
  // the file refused.
  if (const std::vector<pid_t> left = worker.descendants(); !left.empty()) {
    worker.stop();
    const std::string who = plugin ? "the plugin" : fmt::format("the {} worker", mode);
    throw InputError(fmt::format("{}: {} left {}: a fork, spawn or daemon in its constructors or "
                                 "declarations); {} killed",
                                 path, who, processes_running(left, "while loading"),
                                 left.size() == 1 ? "it was" : "they were"));
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
