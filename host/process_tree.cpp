// Finding and killing what a worker started (host/process_tree.h): the
// process tree read from /proc (each task's children list, or every
// process's parent where the kernel has no such lists), the token read from
// /proc/PID/environ.

#include "host/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace attncheck::host_detail {
namespace {

// The whole of a small /proc file ("" when it cannot be read: the process
// is gone). /proc files report a size of 0, so read until the end, at most
// `cap` bytes.
std::string read_proc(const std::string& path, size_t cap = size_t{1} << 20) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    text.append(buf, static_cast<size_t>(k));
    if (text.size() >= cap) break;
  }
  ::close(fd);
  return text;
}

std::vector<pid_t> parse_pids(std::string_view text) {
  std::vector<pid_t> pids;
  long n = 0;
  bool in = false;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      n = n * 10 + (c - '0');
      in = true;
    } else if (in) {
      pids.push_back(static_cast<pid_t>(n));
      n = 0;
      in = false;
    }
  }
  if (in) pids.push_back(static_cast<pid_t>(n));
  return pids;
}

std::vector<pid_t> numeric_entries(const std::string& dir) {
  std::vector<pid_t> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long n = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && n > 0) out.push_back(static_cast<pid_t>(n));
  }
  ::closedir(d);
  return out;
}

// The state letter and parent of a process from /proc/PID/stat (the name
// in parentheses may hold anything, so parse after its last ')').
bool stat_of(pid_t pid, char* state, pid_t* parent) {
  const std::string s = read_proc(fmt::format("/proc/{}/stat", pid), 4096);
  const size_t close = s.rfind(')');
  if (close == std::string::npos || close + 4 > s.size()) return false;
  *state = s[close + 2];
  *parent = static_cast<pid_t>(std::atol(s.c_str() + close + 4));
  return true;
}

bool alive(pid_t pid) {
  char state = 0;
  pid_t parent = 0;
  return stat_of(pid, &state, &parent) && state != 'Z' && state != 'X';
}

// Kernels built without CONFIG_PROC_CHILDREN have no children lists: then
// every process's parent is read instead.
bool have_children_lists() {
  static const bool have = ::access(
      fmt::format("/proc/self/task/{}/children", ::gettid()).c_str(), R_OK) == 0;
  return have;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> kids;
  if (have_children_lists()) {
    for (const pid_t task : numeric_entries(fmt::format("/proc/{}/task", pid))) {
      for (const pid_t k : parse_pids(read_proc(fmt::format("/proc/{}/task/{}/children", pid,
                                                            task))))
        kids.push_back(k);
    }
    return kids;
  }
  for (const pid_t p : numeric_entries("/proc")) {
    char state = 0;
    pid_t parent = 0;
    if (stat_of(p, &state, &parent) && parent == pid) kids.push_back(p);
  }
  return kids;
}

bool carries_token(pid_t pid, const std::string& token) {
  // One read: a process whose environment is empty (cleared, or caught in
  // an exec) is not asked again; retrying cost every later call 100 ms per
  // such orphan. The worker's own tree is found without environments.
  const std::string env = read_proc(fmt::format("/proc/{}/environ", pid));
  const std::string var = std::string(kWorkerTokenVar) + "=" + token;
  for (size_t at = 0; at < env.size();) {
    const size_t end = env.find('\0', at);
    const size_t stop = end == std::string::npos ? env.size() : end;
    if (std::string_view(env).substr(at, stop - at) == var) return true;
    at = stop + 1;
  }
  return false;
}

std::mutex workers_mutex;
// Each process of a worker (relay, kernel, init) and its worker's relay.
std::map<pid_t, pid_t>& workers() {
  static std::map<pid_t, pid_t> pids;
  return pids;
}
// The first signal a worker's tree sent to the harness, by relay.
std::map<pid_t, int>& blamed() {
  static std::map<pid_t, int> sigs;
  return sigs;
}

bool is_worker(pid_t pid) {
  std::lock_guard lock(workers_mutex);
  return workers().count(pid) > 0;
}

}  // namespace

void note_worker(pid_t pid, pid_t owner) {
  std::lock_guard lock(workers_mutex);
  if (owner > 0) {
    workers()[pid] = owner;
  } else {
    workers().erase(pid);
    blamed().erase(pid);
  }
}

bool blame_signal(int sig, int sender) {
  // Up the sender's parents, at most 64 steps: a worker's process, or one
  // below it, is the worker's; this process, init or an unreadable parent
  // end the search (a signal of the terminal or another program).
  pid_t p = static_cast<pid_t>(sender);
  for (int step = 0; step < 64 && p > 1 && p != ::getpid(); ++step) {
    {
      std::lock_guard lock(workers_mutex);
      if (const auto it = workers().find(p); it != workers().end()) {
        blamed().try_emplace(it->second, sig);
        return true;
      }
    }
    char state = 0;
    pid_t parent = 0;
    if (!stat_of(p, &state, &parent)) return false;
    p = parent;
  }
  return false;
}

int take_blamed_signal(pid_t owner) {
  std::lock_guard lock(workers_mutex);
  const auto it = blamed().find(owner);
  if (it == blamed().end()) return 0;
  const int sig = it->second;
  blamed().erase(it);
  return sig;
}

std::string exe_of(pid_t pid) {
  char buf[4096];
  const ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

uint64_t resident_bytes(const std::vector<pid_t>& pids) {
  uint64_t total = 0;
  for (const pid_t p : pids) {
    const std::string s = read_proc(fmt::format("/proc/{}/status", p), 1 << 16);
    for (const char* field : {"\nRssAnon:", "\nRssShmem:"}) {
      const size_t at = s.find(field);
      if (at != std::string::npos) {
        total += static_cast<uint64_t>(std::atoll(s.c_str() + at + std::strlen(field))) << 10;
      }
    }
  }
  return total;
}

bool become_subreaper() {
  static const bool ok = ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  return ok;
}

std::string new_worker_token() {
  static std::atomic<uint64_t> serial{0};
  return fmt::format("{}.{}", ::getpid(), ++serial);
}

std::vector<pid_t> worker_descendants(const std::vector<pid_t>& roots,
                                      const std::vector<pid_t>& skip, const std::string& token) {
  std::set<pid_t> seen(roots.begin(), roots.end());
  std::vector<pid_t> todo;
  for (const pid_t r : roots)
    for (const pid_t k : children_of(r)) todo.push_back(k);
  if (!token.empty()) {
    for (const pid_t c : children_of(::getpid())) {
      if (!seen.count(c) && !is_worker(c) && carries_token(c, token)) todo.push_back(c);
    }
  }
  std::vector<pid_t> found;
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    if (!seen.insert(p).second) continue;
    if (alive(p) && std::find(skip.begin(), skip.end(), p) == skip.end()) found.push_back(p);
    for (const pid_t k : children_of(p)) todo.push_back(k);
  }
  return found;
}

std::vector<pid_t> kill_worker_descendants(const std::vector<pid_t>& roots,
                                           const std::vector<pid_t>& skip,
                                           const std::string& token) {
  std::set<pid_t> killed;
  // A process that forks as fast as it can is caught within a few rounds:
  // each round kills every parent it found, so only their last children
  // remain; 1000 rounds of 1 ms bound the whole. The search ends after
  // three empty rounds in a row, not one: a child caught between clone and
  // exec (its parent killed inside posix_spawn) may be in no children list
  // for that moment.
  int empty_rounds = 0;
  for (int round = 0; round < 1000 && empty_rounds < 3; ++round) {
    const std::vector<pid_t> found = worker_descendants(roots, skip, token);
    empty_rounds = found.empty() ? empty_rounds + 1 : 0;
    for (const pid_t p : found) {
      ::kill(p, SIGKILL);
      killed.insert(p);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<pid_t> pids(killed.begin(), killed.end());
  // Those re-parented to this process (their parents were killed too) are
  // reaped now; the rest are their parents' to reap, or become ours when
  // the worker itself is reaped (reap_adopted again).
  reap_adopted(pids);
  return pids;
}

void reap_adopted(const std::vector<pid_t>& pids) {
  // Each killed process is waited for until it has exited (a zombie, or
  // reaped here when it is this process's child): a SIGKILLed process takes
  // microseconds to die, a large address space on a loaded machine longer;
  // 2 s bound the wait for all of them.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::vector<pid_t> left = pids;
  while (!left.empty()) {
    std::vector<pid_t> again;
    for (const pid_t p : left) {
      const pid_t r = ::waitpid(p, nullptr, WNOHANG);
      if (r == p) continue;                    // ours, reaped
      if (r == 0 || alive(p)) again.push_back(p);  // ours or another's, still dying
    }
    if (again.empty() || std::chrono::steady_clock::now() > until) break;
    left.swap(again);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string processes_running(const std::vector<pid_t>& pids, std::string_view when) {
  constexpr size_t kShown = 5;
  std::string text =
      fmt::format("{} process{} running {} (pid ", pids.size(), pids.size() == 1 ? "" : "es", when);
  for (size_t k = 0; k < pids.size() && k < kShown; ++k) text += fmt::format("{}{}", k ? ", " : "", pids[k]);
  if (pids.size() > kShown) text += ", ...";
  return text;
}

}  // namespace attncheck::host_detail
