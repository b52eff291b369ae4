/* Plugins that are correct attention (the example plugin's f64 kernel)
 * except when tk >= 3, where each does what issue 32's hostile probes did
 * to the harness:
 *   stops_between_calls   stops its worker (SIGSTOP) once its first call
 *                         has returned and the worker waits for the next,
 *                         as SIGTTOU does to a worker that prints on a
 *                         terminal with `stty tostop` (on every call)
 *   daemonizes            forks, calls setsid, forks again: a daemon
 *                         (sleep TAG) whose parent exits at once
 *   spawns                posix_spawn with POSIX_SPAWN_SETSID of sleep TAG
 *                         (no fork handlers run, no process group shared)
 *   forges_status         writes a reply of its own to the worker's
 *                         channel: status 7, empty arrays
 *   sends_huge_reply      writes a reply header announcing 32 GiB
 *   prints_then_crashes   prints on stdout and stderr on every call (a
 *                         banner, a fake summary, an escape sequence),
 *                         and crashes when tk >= 3
 *   closes_channel        closes every descriptor from 3 up and returns
 *   eats_memory           allocates and touches memory until malloc
 *                         fails, then writes through the null pointer
 *   writes_after_return   leaves a thread that writes into the call's out
 *                         2 ms after the call returned
 * Built with ESCAPES_IN_CONSTRUCTOR, loading it starts a daemon.
 * TAG is $ATTNCHECK_TEST_TAG (a number of seconds unique to the test run),
 * so the test finds what outlived the run by command line. Built as a test
 * plugin only (tests/host/isolation.cmake). */
#define _GNU_SOURCE
#define attncheck_plugin_impls example_plugin_impls
#include "../../../examples/plugin/attention.c"
#undef attncheck_plugin_impls

#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

static const char* tag(void) {
  const char* t = getenv("ATTNCHECK_TEST_TAG");
  return t && *t ? t : "1000.5";
}

/* ---- stops_between_calls ---- */
/* After the first call of each worker, a thread waits until the worker's
 * main thread sleeps (waiting for the next request: the reply is sent) and
 * stops the whole process, as SIGTTOU does. */
static char main_state(void) {
  char path[64], buf[512];
  FILE* f;
  size_t n;
  char* close;
  /* The leader's stat, the main thread's state (getpid() is the pid in the
   * worker's PID namespace, not /proc's). */
  snprintf(path, sizeof path, "/proc/self/stat");
  f = fopen(path, "r");
  if (!f) return '?';
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  close = strrchr(buf, ')');
  return close && close[1] == ' ' ? close[2] : '?';
}

static void* stop_when_idle(void* unused) {
  const struct timespec ms = {0, 1000000};
  (void)unused;
  for (;;) {
    nanosleep(&ms, NULL);
    if (main_state() == 'S') {
      raise(SIGSTOP);
      return NULL;
    }
  }
}

static int stops(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  static int calls = 0;
  const int rc = forward_f64(ctx, p, o);
  if (++calls == 1) {
    pthread_t t;
    if (pthread_create(&t, NULL, stop_when_idle, NULL) == 0) pthread_detach(t);
  }
  return rc;
}

/* ---- daemonizes, spawns ---- */
static void exec_sleep(void) {
  execl("/bin/sleep", "sleep", tag(), (char*)NULL);
  _exit(127);
}

static int daemonizes(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    const pid_t child = fork();
    if (child == 0) {
      setsid();
      if (fork() == 0) exec_sleep();
      _exit(0);
    }
    if (child > 0) waitpid(child, NULL, 0);
  }
  return forward_f64(ctx, p, o);
}

static int spawns(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    posix_spawnattr_t attr;
    pid_t pid;
    char* argv[3];
    argv[0] = (char*)"sleep";
    argv[1] = (char*)tag();
    argv[2] = NULL;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    posix_spawn(&pid, "/bin/sleep", NULL, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
  }
  return forward_f64(ctx, p, o);
}

/* ---- forges_status, sends_huge_reply: the wire of host/wire.h ---- */
static void put(char** at, const void* x, size_t n) {
  memcpy(*at, x, n);
  *at += n;
}

static void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t k = write(fd, data, n);
    if (k <= 0) return;
    data += k;
    n -= (size_t)k;
  }
}

/* A forward reply of its own, with `status`, and the worker's pid but a
 * call id it cannot know (0, what is sent without a request). */
static int forge_reply(void* ctx, const attncheck_problem* p, attncheck_outputs* o,
                       int32_t status) {
  if (p->tk >= 3) {
    char frame[128];
    char* at = frame + 8;
    const int32_t pid = (int32_t)getpid(), path = 0;
    const uint8_t kind = 0; /* a forward result */
    const uint64_t none = 0, call = 0;
    const int64_t score = -1;
    uint64_t length;
    put(&at, &pid, sizeof pid);
    put(&at, &call, sizeof call);
    put(&at, &kind, sizeof kind);
    put(&at, &status, sizeof status);
    put(&at, &none, sizeof none); /* error text */
    put(&at, &none, sizeof none); /* out */
    put(&at, &none, sizeof none); /* weights */
    put(&at, &none, sizeof none); /* lse */
    put(&at, &score, sizeof score);
    put(&at, &path, sizeof path);
    length = (uint64_t)(at - frame) - 8;
    memcpy(frame, &length, sizeof length);
    write_all(3, frame, (size_t)(at - frame));
    for (;;) pause();
  }
  return forward_f64(ctx, p, o);
}

static int forges(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  return forge_reply(ctx, p, o, 7);
}

static int forges_ok(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  return forge_reply(ctx, p, o, 0);
}

static int huge(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    static char zeros[1 << 16];
    const uint64_t length = (uint64_t)1 << 35;
    const int32_t pid = (int32_t)getpid();
    int k;
    write_all(3, (const char*)&length, sizeof length);
    write_all(3, (const char*)&pid, sizeof pid);
    for (k = 0; k < 16; ++k) write_all(3, zeros, sizeof zeros);
    for (;;) pause();
  }
  return forward_f64(ctx, p, o);
}

/* ---- prints_then_crashes, closes_channel, eats_memory ---- */
static int prints(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  printf("ATTNCHECK-TEST-BANNER v1.0\n");
  fflush(stdout);
  fprintf(stderr, "0 passed, 0 failed \033[31mfake\033[0m\n");
  if (p->tk >= 3) {
    volatile int* nowhere = NULL;
    *nowhere = 1;
  }
  return forward_f64(ctx, p, o);
}

static int closes(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    int fd;
    for (fd = 3; fd < 1024; ++fd) close(fd);
  }
  return forward_f64(ctx, p, o);
}

static int eats(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  if (p->tk >= 3) {
    for (;;) {
      char* block = (char*)malloc((size_t)16 << 20);
      if (!block) break;
      memset(block, 1, (size_t)16 << 20);
    }
    {
      volatile int* nowhere = NULL;
      *nowhere = 1;
    }
  }
  return forward_f64(ctx, p, o);
}

static void* write_later(void* out) {
  const struct timespec two_ms = {0, 2000000};
  nanosleep(&two_ms, NULL);
  *(volatile double*)out = 42.0;
  return NULL;
}

static int writes_late(void* ctx, const attncheck_problem* p, attncheck_outputs* o) {
  static int started = 0;
  const int rc = forward_f64(ctx, p, o);
  if (p->tk >= 3 && !started) {
    pthread_t t;
    started = 1;
    if (pthread_create(&t, NULL, write_later, o->out) == 0) pthread_detach(t);
  }
  return rc;
}

/* The example's features but STRIDES, so out is contiguous. */
#define ESCAPES_FEATURES (EXAMPLE_FEATURES & ~(uint32_t)ATTNCHECK_FEATURE_STRIDES)
#define ESCAPES_IMPL(name, fn)                                                              \
  {ATTNCHECK_ABI_VERSION, name, 1u << ATTNCHECK_F64, ESCAPES_FEATURES, ATTNCHECK_EMPTY_ROW_ZERO, \
   {ATTNCHECK_F64, ATTNCHECK_F64, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, fn, NULL, NULL,          \
   sizeof(attncheck_impl), ATTNCHECK_F64, 0u, 0u, NULL, {0, 0, 0, 0, 0}, 0u, NULL, NULL}

static const attncheck_impl kEscapes[] = {
    ESCAPES_IMPL("stops_between_calls", stops),  ESCAPES_IMPL("daemonizes", daemonizes),
    ESCAPES_IMPL("spawns", spawns),              ESCAPES_IMPL("forges_status", forges),
    ESCAPES_IMPL("forges_reply", forges_ok),
    ESCAPES_IMPL("sends_huge_reply", huge),      ESCAPES_IMPL("prints_then_crashes", prints),
    ESCAPES_IMPL("closes_channel", closes),      ESCAPES_IMPL("eats_memory", eats),
    ESCAPES_IMPL("writes_after_return", writes_late),
};

#ifdef ESCAPES_IN_CONSTRUCTOR
/* The same plugin, but loading it leaves a daemon: a constructor that
 * double-forks (the way a library starts a helper server). */
__attribute__((constructor)) static void start_daemon(void) {
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) exec_sleep();
    _exit(0);
  }
  if (child > 0) waitpid(child, NULL, 0);
}
#endif

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attncheck_impl* attncheck_plugin_impls(size_t* count) {
  *count = sizeof kEscapes / sizeof kEscapes[0];
  return kEscapes;
}
