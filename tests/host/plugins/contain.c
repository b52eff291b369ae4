/* Plugins that are correct attention (the example plugin's f64 kernel)
 * except when tk >= 3, where each tries what issue 50's containment probes
 * did (tests/host/containment_test.sh):
 *   empty_env_daemon     setsid + double fork, the daemon exec'd with an
 *                        empty environment (envp = {NULL}): sleep TAG
 *   scrubbed_daemon      setsid + double fork, the daemon overwrites its
 *                        environment's bytes (no token left to read) and
 *                        its command line with "sleep TAG", then waits
 *   spawns_then_hangs    posix_spawn of sleep TAG in a session of its own
 *                        with an empty environment, then blocks forever
 *                        (the harness is killed mid-call)
 *   signals_int, signals_term, signals_usr1
 *                        sends the signal to the harness (its pid read
 *                        from the worker's command line), then returns
 *   signals_parent       kill(getppid(), SIGINT), then returns
 *   checks_privileges    aborts when it has any capability, no
 *                        no_new_privs, or can ptrace the harness
 *   shares_memory        touches 512 MiB of MAP_SHARED | MAP_ANONYMOUS
 *   grows_down           touches 512 MiB of MAP_GROWSDOWN
 *   replies_between_calls leaves a thread (from its first call, whatever
 *                        tk) that writes a well-formed reply to the
 *                        channel once the call has returned
 *   replaces_channel     dup2s /dev/null onto the channel (descriptor 3)
 *   half_header          writes half a frame header, then blocks
 *   execs                execs sleep TAG in place of the worker
 * Built with CONTAIN_CTOR_WRITES, its constructor writes a line to the
 * harness's stdout through /proc/HARNESS/fd/1.
 * TAG is $ATTNCHECK_TEST_TAG, unique to the test run, so the test finds
 * what outlived the run by command line. Built as a test plugin only
 * (tests/host/isolation.cmake). */
#define _GNU_SOURCE
#define attncheck_plugin_impls example_plugin_impls
#include "../../../examples/plugin/attention.c"
#undef attncheck_plugin_impls

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char* tag(void) {
  const char* t = getenv("ATTNCHECK_TEST_TAG");
  return t && *t ? t : "1000.5";
}

/* The harness's pid, as any process of a worker can read it: the argument
 * after --attncheck-worker in its command line. */
static pid_t harness_pid(void) {
  char buf[8192];
  const int fd = open("/proc/self/cmdline", O_RDONLY);
  ssize_t n;
  char* at;
  if (fd < 0) return 0;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  for (at = buf; at < buf + n; at += strlen(at) + 1) {
    if (strcmp(at, "--attncheck-worker") == 0) return (pid_t)atoi(at + strlen(at) + 1);
  }
  return 0;
}

static void sleep_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&t, NULL);
}

/* ---- daemons ---- */
static void exec_sleep_without_environment(void) {
  char* argv[3];
  char* envp[1] = {NULL};
  argv[0] = (char*)"sleep";
  argv[1] = (char*)tag();
  argv[2] = NULL;
  execve("/bin/sleep", argv, envp);
  _exit(127);
}

/* Overwrites the environment's bytes (mm->env_start..env_end, fields 50
 * and 51 of /proc/self/stat) and the command line with "sleep TAG". */
static void scrub_and_wait(void) {
  char buf[4096];
  const int fd = open("/proc/self/stat", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  unsigned long env_start = 0, env_end = 0;
  char* s;
  int field;
  if (fd >= 0) close(fd);
  if (n > 0) {
    buf[n] = '\0';
    s = strrchr(buf, ')');
    /* fields after the name: 3 is the state; env_start is field 50 */
    for (field = 2; s && field < 50; ++field) s = strchr(s + 1, ' ');
    if (s) sscanf(s + 1, "%lu %lu", &env_start, &env_end);
  }
  if (env_start && env_end > env_start) memset((void*)env_start, 'x', env_end - env_start - 1);
  {
    char* argv0 = program_invocation_name;
    const size_t room = strlen(argv0);
    char marker[128];
    snprintf(marker, sizeof marker, "sleep %s", tag());
    if (strlen(marker) <= room) {
      memset(argv0, 0, room);
      memcpy(argv0, marker, strlen(marker));
    }
  }
  for (;;) pause();
}

static void daemonize(void (*body)(void)) {
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) body();
    _exit(0);
  }
  if (child > 0) waitpid(child, NULL, 0);
}

static int empty_env(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) daemonize(exec_sleep_without_environment);
  return forward_f64(ctx, p, o);
}

static int scrubbed(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) daemonize(scrub_and_wait);
  return forward_f64(ctx, p, o);
}

static int spawns_hangs(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    posix_spawnattr_t attr;
    pid_t pid;
    char* argv[3];
    char* envp[1] = {NULL};
    argv[0] = (char*)"sleep";
    argv[1] = (char*)tag();
    argv[2] = NULL;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    posix_spawn(&pid, "/bin/sleep", NULL, &attr, argv, envp);
    posix_spawnattr_destroy(&attr);
    for (;;) pause();
  }
  return forward_f64(ctx, p, o);
}

/* ---- signals ---- */
static int signals(int sig, pid_t to, void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    kill(to, sig);
    sleep_ms(100);
  }
  return forward_f64(ctx, p, o);
}
static int sig_int(void* c, const attncheck_problem* p, attncheck_outputs* o) {
  return signals(SIGINT, harness_pid(), c, p, o);
}
static int sig_term(void* c, const attncheck_problem* p, attncheck_outputs* o) {
  return signals(SIGTERM, harness_pid(), c, p, o);
}
static int sig_usr1(void* c, const attncheck_problem* p, attncheck_outputs* o) {
  return signals(SIGUSR1, harness_pid(), c, p, o);
}
static int sig_parent(void* c, const attncheck_problem* p, attncheck_outputs* o) {
  return signals(SIGINT, getppid(), c, p, o);
}

/* ---- privileges ---- */
static unsigned long long status_hex(const char* field) {
  char buf[8192];
  const int fd = open("/proc/self/status", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  const char* at;
  if (fd >= 0) close(fd);
  if (n <= 0) return ~0ull;
  buf[n] = '\0';
  at = strstr(buf, field);
  return at ? strtoull(at + strlen(field), NULL, 16) : ~0ull;
}

static int privileges(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (status_hex("\nCapEff:") || status_hex("\nCapPrm:") || status_hex("\nCapBnd:") ||
      status_hex("\nCapAmb:") || status_hex("\nNoNewPrivs:") != 1) {
    abort();
  }
  {
    const pid_t h = harness_pid();
    if (h > 0 && ptrace(PTRACE_ATTACH, h, NULL, NULL) == 0) {
      ptrace(PTRACE_DETACH, h, NULL, NULL);
      abort();
    }
  }
  return forward_f64(ctx, p, o);
}

/* ---- memory ---- */
static int touches(int flags, void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    const size_t size = (size_t)512 << 20;
    char* m = (char*)mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (m != (char*)MAP_FAILED) {
      size_t k;
      for (k = 0; k < size; k += 4096) m[k] = 1;
      munmap(m, size);
    }
  }
  return forward_f64(ctx, p, o);
}
static int shares(void* c, const attncheck_problem* p, attncheck_outputs* o) {
  return touches(MAP_SHARED | MAP_ANONYMOUS, c, p, o);
}
static int grows(void* c, const attncheck_problem* p, attncheck_outputs* o) {
  return touches(MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN, c, p, o);
}

/* ---- the wire (host/wire.h) ---- */
static void put(char** at, const void* x, size_t n) {
  memcpy(*at, x, n);
  *at += n;
}

/* The state letter of the worker's main thread. */
static char main_state(void) {
  char buf[512];
  ssize_t n;
  int fd;
  char* close_paren;
  /* the leader's stat (a pid namespace's pids are not /proc's) */
  fd = open("/proc/self/stat", O_RDONLY);
  if (fd < 0) return '?';
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return '?';
  buf[n] = '\0';
  close_paren = strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' ? close_paren[2] : '?';
}

/* A well-formed forward reply (status ok, no arrays), once the call that
 * started it has returned and the worker waits for the next request. */
static void* reply_later(void* unused) {
  char frame[128];
  char* at = frame + 8;
  const int32_t pid = (int32_t)getpid(), status = 0, path = -1;
  const uint8_t kind = 0;
  const uint64_t none = 0, call = 0; /* the call id it cannot know */
  const int64_t score = -1;
  uint64_t length;
  (void)unused;
  /* Between calls the worker waits for the harness's next request for
   * well under a millisecond: looked for without sleeping, so that this
   * thread is running when the main thread blocks, even on a loaded
   * machine. */
  while (main_state() != 'S') sched_yield();
  put(&at, &pid, sizeof pid);
  put(&at, &call, sizeof call);
  put(&at, &kind, sizeof kind);
  put(&at, &status, sizeof status);
  put(&at, &none, sizeof none);
  put(&at, &none, sizeof none);
  put(&at, &none, sizeof none);
  put(&at, &none, sizeof none);
  put(&at, &score, sizeof score);
  put(&at, &path, sizeof path);
  length = (uint64_t)(at - frame) - 8;
  memcpy(frame, &length, sizeof length);
  (void)!write(3, frame, (size_t)(at - frame));
  return NULL;
}

static int between(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  static int started = 0;
  /* From the worker's first call: every later call is a chance to catch
   * the worker waiting for its request. */
  if (!started) {
    pthread_t t;
    started = 1;
    if (pthread_create(&t, NULL, reply_later, NULL) == 0) pthread_detach(t);
  }
  return forward_f64(ctx, p, o);
}

static int replaces(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    const int null = open("/dev/null", O_RDWR);
    dup2(null, 3);
    close(null);
  }
  return forward_f64(ctx, p, o);
}

static int half(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    const uint32_t low = 64;
    (void)!write(3, &low, sizeof low);
    for (;;) pause();
  }
  return forward_f64(ctx, p, o);
}

static int execs(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    execl("/bin/sleep", "sleep", tag(), (char*)NULL);
  }
  return forward_f64(ctx, p, o);
}

#define CONTAIN_FEATURES (EXAMPLE_FEATURES & ~(uint32_t)ATTNCHECK_FEATURE_STRIDES)
#define CONTAIN_IMPL(name, fn)                                                              \
  {ATTNCHECK_ABI_VERSION, name, 1u << ATTNCHECK_F64, CONTAIN_FEATURES, ATTNCHECK_EMPTY_ROW_ZERO, \
   {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, fn, NULL, NULL,          \
   sizeof(attncheck_impl), ATTNCHECK_F64, 0u, 0u, NULL, {0, 0, 0, 0, 0}, 0u, NULL, NULL}

static const attncheck_impl kContain[] = {
    CONTAIN_IMPL("empty_env_daemon", empty_env),
    CONTAIN_IMPL("scrubbed_daemon", scrubbed),
    CONTAIN_IMPL("spawns_then_hangs", spawns_hangs),
    CONTAIN_IMPL("signals_int", sig_int),
    CONTAIN_IMPL("signals_term", sig_term),
    CONTAIN_IMPL("signals_usr1", sig_usr1),
    CONTAIN_IMPL("signals_parent", sig_parent),
    CONTAIN_IMPL("checks_privileges", privileges),
    CONTAIN_IMPL("shares_memory", shares),
    CONTAIN_IMPL("grows_down", grows),
    CONTAIN_IMPL("replies_between_calls", between),
    CONTAIN_IMPL("replaces_channel", replaces),
    CONTAIN_IMPL("half_header", half),
    CONTAIN_IMPL("execs", execs),
};

#ifdef CONTAIN_CTOR_WRITES
__attribute__((constructor)) static void write_to_harness(void) {
  char path[64];
  int fd;
  snprintf(path, sizeof path, "/proc/%d/fd/1", (int)harness_pid());
  fd = open(path, O_WRONLY);
  if (fd >= 0) {
    (void)!write(fd, "NOT JSON from a constructor\n", 28);
    close(fd);
  }
}
#endif

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kContain / sizeof kContain[0];
  return kContain;
}
