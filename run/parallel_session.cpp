#include "run/parallel_session.h"

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "host/isolation.h"
#include "host/wire.h"
#include "run/outcome_codec.h"

namespace attncheck {
namespace {

using host_detail::Reader;
using host_detail::Writer;

// What a child sends back for an item.
enum class Reply : uint8_t { outcome = 0, input_error = 1, error = 2 };

std::optional<std::string> read_frame(int fd) {
  uint64_t n = 0;
  if (!host_detail::read_exact(fd, reinterpret_cast<char*>(&n), sizeof n)) return std::nullopt;
  if (n > (uint64_t{1} << 32)) return std::nullopt;  // not a frame this program wrote
  std::string payload(n, '\0');
  if (!host_detail::read_exact(fd, payload.data(), n)) return std::nullopt;
  return payload;
}

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return fmt::format("crashed with signal {} (SIG{})", WTERMSIG(status), name ? name : "?");
  }
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended";
}

// A child: takes items from `fd` until it is closed, sends each one's
// outcome back, then stops its workers and ends without running the
// parent's exit handlers or flushing its buffers (_exit).
[[noreturn]] void child_loop(int fd, const ParallelCallbacks& cb) {
  int code = 0;
  try {
    while (const std::optional<std::string> task = read_frame(fd)) {
      Reader r(*task);
      const auto index = r.get<uint64_t>();
      const auto hangs_before = r.get<int32_t>();
      Writer w;
      w.put<uint64_t>(index);
      try {
        const ItemRun run = cb.run_item(index, hangs_before);
        w.put(Reply::outcome);
        w.put<int32_t>(run.hangs);
        w.put_str(encode_outcome(run.outcome));
      } catch (const InputError& e) {
        w.put(Reply::input_error);
        w.put_str(e.what());
      } catch (const std::exception& e) {
        w.put(Reply::error);
        w.put_str(e.what());
      }
      if (!host_detail::send_frame(fd, w.bytes())) break;
    }
  } catch (...) {
    code = 1;
  }
  stop_idle_workers();
  std::fflush(stderr);
  _exit(code);
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::optional<size_t> running;
};

class Children {
 public:
  explicit Children(const ParallelCallbacks& cb) : cb_(cb), parent_(::getpid()) {}
  ~Children() {
    for (Child& c : children_) end(c, true);
  }

  std::vector<Child>& all() { return children_; }

  // A new child, forked from this process (which runs nothing of an item).
  Child& spawn() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw std::runtime_error("--jobs: cannot create a socket pair");
    std::fflush(nullptr);  // nothing buffered is written twice
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      throw std::runtime_error("--jobs: cannot fork");
    }
    if (pid == 0) {
      // A parent that is killed (SIGKILL, no chance to stop its children)
      // sends them SIGTERM: the item each runs ends as interrupted, its
      // channel is gone, and it stops its workers and ends.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent_) ::raise(SIGTERM);
      // The other children's channels are theirs.
      for (const Child& c : children_)
        if (c.fd >= 0) ::close(c.fd);
      ::close(sv[0]);
      child_loop(sv[1], cb_);
    }
    ::close(sv[1]);
    children_.push_back({pid, sv[0], std::nullopt});
    return children_.back();
  }

  // Closes the channel (the child ends when it has none) and reaps it;
  // `kill` first when it must not finish what it runs.
  std::string end(Child& c, bool kill) {
    if (c.pid < 0) return {};
    if (kill) ::kill(c.pid, SIGKILL);
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    c.pid = -1;
    return how_it_ended(status);
  }

 private:
  const ParallelCallbacks& cb_;
  pid_t parent_;
  std::vector<Child> children_;
};

// The items not yet given out, in the order they are given: those to run
// again first, then the next of the work list; each keeps busy the threads
// of its implementation (at most `jobs`). An item starts while the threads
// of those running and its own fit in `jobs` (alone it always fits), in
// this order: one that does not fit waits for the running ones.
struct Queue {
  size_t count;
  int jobs;
  const ParallelCallbacks& cb;
  std::deque<size_t> redo;
  size_t next = 0;
  int busy_threads = 0;

  bool empty() const { return redo.empty() && next >= count; }
  int weight(size_t i) const { return std::clamp(cb.threads ? cb.threads(i) : 1, 1, jobs); }
  bool fits() const {
    return busy_threads == 0 || busy_threads + weight(redo.empty() ? next : redo.front()) <= jobs;
  }
  size_t take() {
    size_t i = next;
    if (!redo.empty()) {
      i = redo.front();
      redo.pop_front();
    } else {
      ++next;
    }
    busy_threads += weight(i);
    return i;
  }
  void ended(size_t i) { busy_threads -= weight(i); }
};

}  // namespace

int default_jobs(int64_t per_job_mb) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  cpus = std::max(cpus, 1);
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (per_job_mb > 0 && std::getline(meminfo, line)) {
    std::istringstream in(line);
    std::string key;
    int64_t kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") {
      return static_cast<int>(std::clamp<int64_t>(kib / 1024 / per_job_mb, 1, cpus));
    }
  }
  return cpus;
}

// The hangs an item's implementation met in the items before it (in
// work-list order) decide how it treats a hang of its own, as in one
// process. An item is run with those of the earlier items finished by then
// (`base`); when it comes to be reported and the earlier ones have since
// hung more, it is run again with the right count (Queue::redo), so every
// verdict is the one --jobs 1 gives.
void run_in_parallel(size_t count, int jobs, const ParallelCallbacks& cb) {
  // No worker of this process is inherited by a child (each starts its
  // own when it first calls an implementation).
  stop_idle_workers();
  Children children(cb);
  std::map<size_t, PropertyOutcome> finished;  // out of order, not yet done
  std::vector<size_t> key(count);
  std::map<size_t, std::vector<size_t>> items_of;  // per hangs_key, in order
  for (size_t i = 0; i < count; ++i) {
    key[i] = cb.hangs_key(i);
    items_of[key[i]].push_back(i);
  }
  std::vector<int> item_hangs(count, 0), base(count, 0);
  std::vector<bool> has_hangs(count, false), killed_once(count, false);
  const auto earlier_hangs = [&](size_t i, bool finished_only) {
    int n = 0;
    for (size_t j : items_of[key[i]]) {
      if (j >= i) break;
      if (!finished_only || has_hangs[j]) n += item_hangs[j];
    }
    return n;
  };
  Queue queue{count, jobs, cb, {}, 0, 0};
  size_t emitted = 0;
  bool interrupted = false;
  std::optional<InputError> input_error;
  std::optional<std::runtime_error> error;
  const auto stopping = [&] { return interrupted || input_error || error; };
  const auto work_left = [&] { return !stopping() && !queue.empty(); };
  const auto assign = [&](Child& c) {
    const size_t i = queue.take();
    base[i] = earlier_hangs(i, true);
    Writer w;
    w.put<uint64_t>(i);
    w.put<int32_t>(base[i]);
    c.running = i;
    if (!host_detail::send_frame(c.fd, w.bytes())) {
      // Gone before it took the item: its death is the item's outcome.
      c.running.reset();
      queue.ended(i);
      finished[i] = cb.outcome_of_death(i, children.end(c, false));
      has_hangs[i] = true;
    }
  };
  // The idle children take the next items while they fit, then new ones
  // do, up to `jobs` children (one that died is replaced); with no work
  // left an idle child ends.
  const auto top_up = [&] {
    int live = 0;
    for (Child& c : children.all()) {
      if (c.pid <= 0) continue;
      if (!c.running && !work_left()) {
        children.end(c, false);
        continue;
      }
      if (!c.running && queue.fits()) assign(c);
      live += c.pid > 0;
    }
    for (; live < jobs && work_left() && queue.fits(); ++live) assign(children.spawn());
  };

  while (emitted < count) {
    top_up();
    if (!interrupted && cb.cancelled()) {
      interrupted = true;
      for (Child& c : children.all())
        if (c.pid > 0) ::kill(c.pid, SIGTERM);
    }
    if (stopping()) {
      while (!queue.empty()) {
        const size_t i = queue.take();
        queue.ended(i);
        finished[i] = cb.not_started(i), has_hangs[i] = true;
      }
    }
    std::vector<pollfd> fds;
    std::vector<Child*> of;
    for (Child& c : children.all()) {
      if (c.pid > 0 && c.running) {
        fds.push_back({c.fd, POLLIN, 0});
        of.push_back(&c);
      }
    }
    if (!fds.empty()) {
      const int ready = ::poll(fds.data(), fds.size(), 200);
      if (ready < 0 && errno != EINTR) throw std::runtime_error("--jobs: poll failed");
      for (size_t k = 0; ready > 0 && k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Child& c = *of[k];
        const size_t i = *c.running;
        c.running.reset();
        queue.ended(i);
        const std::optional<std::string> reply = read_frame(c.fd);
        if (!reply) {
          const std::string how = children.end(c, false);
          // Killed from outside (SIGKILL: the OOM killer, an operator) is
          // no verdict of the item's: it runs once more in a new process.
          if (!interrupted && !killed_once[i] && how.find("(SIGKILL)") != std::string::npos) {
            killed_once[i] = true;
            queue.redo.push_back(i);
            continue;
          }
          finished[i] = interrupted ? cb.not_started(i) : cb.outcome_of_death(i, how);
          item_hangs[i] = 0;
          has_hangs[i] = true;
          continue;
        }
        Reader r(*reply);
        if (r.get<uint64_t>() != i) throw std::runtime_error("--jobs: a reply for another item");
        const auto kind = r.get<Reply>();
        if (kind == Reply::outcome) {
          item_hangs[i] = r.get<int32_t>();
          finished[i] = decode_outcome(r.get_str());
        } else {
          const std::string what = r.get_str();
          if (kind == Reply::input_error) input_error.emplace(what);
          else error.emplace(what);
          finished[i] = cb.not_started(i);
          item_hangs[i] = 0;
        }
        has_hangs[i] = true;
      }
    }
    while (emitted < count && !input_error && !error) {
      const auto it = finished.find(emitted);
      if (it == finished.end()) break;
      // Every earlier item is final now: was this one run with their hangs?
      if (!stopping() && earlier_hangs(emitted, false) != base[emitted]) {
        finished.erase(it);
        has_hangs[emitted] = false;
        item_hangs[emitted] = 0;
        queue.redo.push_front(emitted);
        break;
      }
      cb.done(emitted, std::move(it->second), item_hangs[emitted]);
      finished.erase(it);
      ++emitted;
    }
    if (input_error || error) {
      bool busy = false;
      for (Child& c : children.all()) busy = busy || (c.pid > 0 && c.running);
      if (!busy) break;
    }
  }
  if (input_error) throw *input_error;
  if (error) throw *error;
}

}  // namespace attncheck
