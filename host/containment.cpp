// A worker's containment (host/containment.h): the PID namespace and its
// init, the relay that forks the kernel process and reports its end as its
// own, and the privileges a kernel process never needs, dropped. Raw
// system calls throughout: libcap may not be installed, and the init runs
// in a copy of the worker made by clone, where only async-signal-safe calls
// belong.

#include "host/containment.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "host/process_tree.h"
#include "host/wire.h"

namespace attncheck::host_detail {
namespace {

// Processes and threads a worker's tree may add to what the machine runs
// when it starts (RLIMIT_NPROC counts every task of the real user): room
// for any thread pool, a bound on a fork bomb.
constexpr rlim_t kMaxWorkerTasks = 2048;

// The kernel process's channel, as it was when the worker started: a
// descriptor 3 that is another file later was replaced by the
// implementation.
dev_t channel_dev = 0;
ino_t channel_ino = 0;

bool write_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A PID namespace for the children of this process: directly with
// CAP_SYS_ADMIN (root), else inside a user namespace of its own that maps
// the user to itself (an unprivileged user). "" on success, else why not.
std::string new_pid_namespace() {
  if (::unshare(CLONE_NEWPID) == 0) return {};
  const int direct = errno;
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) {
    return fmt::format("unshare(CLONE_NEWPID): {}; with a user namespace: {}",
                       std::strerror(direct), std::strerror(errno));
  }
  // Without maps the user would read as nobody inside; setgroups must be
  // denied before an unprivileged process may write its gid map.
  write_file("/proc/self/setgroups", "deny");
  write_file("/proc/self/uid_map", fmt::format("{} {} 1", uid, uid));
  write_file("/proc/self/gid_map", fmt::format("{} {} 1", gid, gid));
  return {};
}

void close_all_descriptors() {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 0u, ~0u, 0u) == 0) return;
#endif
  for (int fd = 0; fd < 65536; ++fd) ::close(fd);
}

// The namespace's init: the first process in it, a sibling of the worker
// (a child of the harness, so PR_SET_PDEATHSIG ties it to the harness, not
// to a process the implementation runs in). It reaps what is orphaned in the
// namespace until it is killed; its death kills everything in it.
[[noreturn]] void init_main(int harness_pidfd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The harness may have died before the line above: its pidfd says so.
  if (harness_pidfd >= 0) {
    pollfd p{harness_pidfd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) _exit(0);
  }
  ::prctl(PR_SET_NAME, "attncheck-init");
  close_all_descriptors();
  drop_privileges();
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  for (;;) {
    siginfo_t info;
    ::sigwaitinfo(&chld, &info);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
}

// Starts the init in the PID namespace this process's children now go to:
// its pid, or -1 when clone refused.
pid_t start_init(pid_t harness) {
  int pidfd = -1;
#ifdef SYS_pidfd_open
  pidfd = static_cast<int>(::syscall(SYS_pidfd_open, harness, 0));
#endif
  // CLONE_PARENT: the init's parent is the harness (fork semantics
  // otherwise: a copy of this single-threaded process).
  const long pid = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) init_main(pidfd);
  if (pidfd >= 0) ::close(pidfd);
  return static_cast<pid_t>(pid);
}

// The kernel process's id inside its namespace (the last NSpid field), as
// its own getpid() will say in every reply.
pid_t pid_inside(pid_t pid) {
  const int fd = ::open(fmt::format("/proc/{}/status", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pid;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return pid;
  buf[n] = '\0';
  const char* at = std::strstr(buf, "\nNSpid:");
  if (!at) return pid;
  pid_t last = pid;
  for (const char* s = at + 7; *s && *s != '\n';) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end == s) break;
    last = static_cast<pid_t>(v);
    s = end;
  }
  return last;
}

// The kernel's end as the relay's own: the same signal (the relay is no
// init, so it can die of one; no core file: RLIMIT_CORE is 0), or the same
// exit status.
[[noreturn]] void end_as(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::raise(sig);
    _exit(128 + sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
}

// The relay: waits for the kernel process and ends as it did, after ending
// what it left (the namespace, by its init; else the tree below the relay,
// a subreaper). Termination signals from the harness are passed on to the
// kernel; from anywhere else (the kernel signalling its parent) they are
// ignored. Outside a namespace the harness's death arrives as `pdeath`, and
// the relay kills its tree before it goes.
[[noreturn]] void relay(pid_t kernel, pid_t init, pid_t harness, const sigset_t& set,
                        int pdeath) {
  for (;;) {
    siginfo_t info{};
    const int sig = ::sigwaitinfo(&set, &info);
    if (sig < 0) continue;
    if (sig == SIGCHLD) {
      int status = 0, kernel_status = 0;
      bool ended = false;
      for (pid_t r; (r = ::waitpid(-1, &status, WNOHANG)) > 0;) {
        if (r == kernel) {
          ended = true;
          kernel_status = status;
        }
      }
      if (!ended) continue;
      if (init > 0) {
        ::kill(init, SIGKILL);
      } else {
        kill_worker_descendants({::getpid()}, {}, "");
      }
      end_as(kernel_status);
    }
    if (sig == pdeath && init < 0 && info.si_pid == harness) {
      kill_worker_descendants({::getpid()}, {}, "");
      _exit(0);
    }
    if (info.si_pid == harness && sig != pdeath) ::kill(kernel, sig);
  }
}

}  // namespace

void drop_privileges() {
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  for (int cap = 0; cap < 64; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL) break;
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  ::syscall(SYS_capset, &header, data);
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  // The tasks the machine runs now (the fourth field of /proc/loadavg,
  // "running/total"), plus room: where RLIMIT_NPROC is enforced (not for
  // uid 0) a fork bomb stops there.
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  const char* slash = std::strchr(buf, '/');
  if (!slash) return;
  const rlim_t bound = static_cast<rlim_t>(std::atoll(slash + 1)) + kMaxWorkerTasks;
  rlimit now{};
  if (::getrlimit(RLIMIT_NPROC, &now) != 0) return;
  if (now.rlim_max != RLIM_INFINITY && now.rlim_max < bound) return;
  const rlimit lower{bound, bound};
  ::setrlimit(RLIMIT_NPROC, &lower);
}

int channel_failure_exit() {
  struct stat st {};
  if (::fstat(kWorkerFd, &st) != 0) return errno == EBADF ? kChannelLostExit : 0;
  if (st.st_dev != channel_dev || st.st_ino != channel_ino) return kChannelReplacedExit;
  return 0;
}

void contain_worker(pid_t harness) {
  // No core file of the relay when it ends with its kernel's signal.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  const int pdeath = SIGRTMIN + 3;
  sigset_t set, old;
  sigemptyset(&set);
  for (const int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, pdeath})
    sigaddset(&set, sig);
  // Blocked before the fork: a SIGCHLD whose action is to ignore it would be
  // dropped, not kept pending.
  ::sigprocmask(SIG_BLOCK, &set, &old);
  const char* no_ns = std::getenv(kNoPidNamespaceVar);
  std::string why = no_ns && *no_ns && std::strcmp(no_ns, "0") != 0
                        ? fmt::format("{} is set", kNoPidNamespaceVar)
                        : new_pid_namespace();
  pid_t init = -1;
  if (why.empty()) {
    init = start_init(harness);
    if (init < 0) why = fmt::format("clone: {}", std::strerror(errno));
  }
  if (init < 0) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    ::prctl(PR_SET_PDEATHSIG, pdeath);
    if (::getppid() != harness) _exit(0);
  }
  drop_privileges();
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) _exit(4);
  const pid_t kernel = ::fork();
  if (kernel < 0) _exit(4);
  if (kernel == 0) {
    // The kernel process waits until the relay has sent its message: it is
    // the first the harness reads, before anything the implementation
    // writes to the channel.
    ::close(go[1]);
    char byte = 0;
    ssize_t n;
    do {
      n = ::read(go[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    ::close(go[0]);
    if (n != 1) _exit(0);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::setpgid(0, 0);  // kill(0, ...) in the implementation reaches only its own group
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::fcntl(kWorkerFd, F_SETFD, FD_CLOEXEC);  // an execve ends the channel
    struct stat st {};
    if (::fstat(kWorkerFd, &st) == 0) {
      channel_dev = st.st_dev;
      channel_ino = st.st_ino;
    }
    return;
  }
  ::close(go[0]);
  // Named, so a measurement of the worker's tree (bench/) looks through it.
  ::prctl(PR_SET_NAME, "attncheck-relay");
  Writer w;
  w.put<int32_t>(::getpid());
  w.put<uint64_t>(0);  // no call: the relay speaks before the first request
  if (init > 0) {
    w.put<uint8_t>(kContained);
    w.put<int32_t>(init);
    w.put<int32_t>(kernel);
    w.put<int32_t>(pid_inside(kernel));
  } else {
    w.put<uint8_t>(kUncontained);
    w.put<int32_t>(kernel);
    w.put_str(why);
  }
  send_frame(kWorkerFd, w.bytes());
  (void)!::write(go[1], "1", 1);
  ::close(go[1]);
  // The relay holds nothing of the kernel's: the channel's end and the
  // output pipe are the kernel's alone.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (const int fd : {0, 1, 2}) ::dup2(null, fd);
  ::close(null);
  ::close(kWorkerFd);
  relay(kernel, init, harness, set, pdeath);
}

}  // namespace attncheck::host_detail
