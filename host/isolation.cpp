// Implementations behind a worker process (attncheck/isolation.h).
//
// One worker per isolated implementation, spawned when first needed and
// again after it died. The two ends talk over a socketpair in frames (a
// uint64 length, then the payload) of a small binary encoding: both ends
// are the same binary, so doubles travel bit for bit, NaN payloads and
// strides included. Every reply starts with the process id of its sender.

#include "attncheck/isolation.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "attncheck/cancel.h"
#include "attncheck/error.h"
#include "attncheck/layer.h"
#include "attncheck/modules.h"
#include "attncheck/plugin_loader.h"
#include "attncheck/registry.h"
#include "attncheck/text.h"

namespace attncheck {
namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& x) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&x), sizeof x);
  }
  template <typename T>
  void put_vec(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.append(s);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T x;
    take(&x, sizeof x);
    return x;
  }
  template <typename T>
  std::vector<T> get_vec() {
    const auto n = get<uint64_t>();
    if (n > (bytes_.size() - pos_) / sizeof(T)) throw std::runtime_error("isolation: truncated message");
    std::vector<T> v(n);
    take(v.data(), n * sizeof(T));
    return v;
  }
  std::string get_str() {
    const std::vector<char> v = get_vec<char>();
    return {v.begin(), v.end()};
  }

 private:
  void take(void* dst, size_t n) {
    if (n > bytes_.size() - pos_) throw std::runtime_error("isolation: truncated message");
    if (n) std::memcpy(dst, bytes_.data() + pos_, n);  // dst is null for an empty vector
    pos_ += n;
  }
  const std::string& bytes_;
  size_t pos_ = 0;
};

void put_tensor(Writer& w, const Tensor& t) {
  w.put_vec(t.data);
  w.put(t.strides);
}

Tensor get_tensor(Reader& r) {
  Tensor t;
  t.data = r.get_vec<double>();
  t.strides = r.get<std::array<int64_t, 4>>();
  return t;
}

template <typename T>
void put_broadcast(Writer& w, const std::optional<Broadcast<T>>& b) {
  w.put<uint8_t>(b.has_value());
  if (!b) return;
  w.put(b->batch);
  w.put(b->heads);
  w.put_vec(b->data);
}

template <typename T>
std::optional<Broadcast<T>> get_broadcast(Reader& r) {
  if (!r.get<uint8_t>()) return std::nullopt;
  Broadcast<T> b;
  b.batch = r.get<int64_t>();
  b.heads = r.get<int64_t>();
  b.data = r.get_vec<T>();
  return b;
}

// An optional value: a presence byte, then the value.
template <typename T>
void put_optional(Writer& w, const std::optional<T>& x) {
  w.put<uint8_t>(x.has_value());
  if (x) w.put(*x);
}

template <typename T>
std::optional<T> get_optional(Reader& r) {
  if (!r.get<uint8_t>()) return std::nullopt;
  return r.get<T>();
}

// The version 2 parts of a problem, after the version 1 ones.
void put_problem_v2(Writer& w, const Problem& p) {
  put_optional(w, p.q_dtype);
  put_optional(w, p.kv_dtype);
  put_optional(w, p.descale);
  w.put_vec(p.sink);
  w.put<uint8_t>(p.packed.has_value());
  if (p.packed) {
    w.put_vec(p.packed->cu_seqlens_q);
    w.put_vec(p.packed->cu_seqlens_k);
  }
  w.put<uint8_t>(p.paged.has_value());
  if (p.paged) {
    w.put_vec(p.paged->seqlens_k);
    w.put_vec(p.paged->block_table);
    for (int64_t x : {p.paged->block_table_stride, p.paged->page_size, p.paged->num_pages}) {
      w.put(x);
    }
  }
}

void get_problem_v2(Reader& r, Problem& p) {
  p.q_dtype = get_optional<DType>(r);
  p.kv_dtype = get_optional<DType>(r);
  p.descale = get_optional<Descales>(r);
  p.sink = r.get_vec<double>();
  if (r.get<uint8_t>()) {
    PackedSeqs packed;
    packed.cu_seqlens_q = r.get_vec<int64_t>();
    packed.cu_seqlens_k = r.get_vec<int64_t>();
    p.packed = std::move(packed);
  }
  if (r.get<uint8_t>()) {
    PagedKv paged;
    paged.seqlens_k = r.get_vec<int64_t>();
    paged.block_table = r.get_vec<int64_t>();
    for (int64_t* x : {&paged.block_table_stride, &paged.page_size, &paged.num_pages}) {
      *x = r.get<int64_t>();
    }
    p.paged = std::move(paged);
  }
}

void put_problem(Writer& w, const Problem& p) {
  w.put(p.dtype);
  for (int64_t x : {p.batch, p.heads, p.kv_heads, p.tq, p.tk, p.dk, p.dv}) w.put(x);
  put_tensor(w, p.q);
  put_tensor(w, p.k);
  put_tensor(w, p.v);
  w.put_vec(p.key_valid);
  put_broadcast(w, p.mask);
  put_broadcast(w, p.bias);
  w.put<uint8_t>(p.causal);
  w.put(p.align);
  w.put(p.window_left);
  w.put(p.window_right);
  w.put(p.scale);
  w.put(p.softcap);
  w.put_vec(p.dout);
  put_problem_v2(w, p);
}

Problem get_problem(Reader& r) {
  Problem p;
  p.dtype = r.get<DType>();
  for (int64_t* x : {&p.batch, &p.heads, &p.kv_heads, &p.tq, &p.tk, &p.dk, &p.dv}) {
    *x = r.get<int64_t>();
  }
  p.q = get_tensor(r);
  p.k = get_tensor(r);
  p.v = get_tensor(r);
  p.key_valid = r.get_vec<uint8_t>();
  p.mask = get_broadcast<uint8_t>(r);
  p.bias = get_broadcast<double>(r);
  p.causal = r.get<uint8_t>() != 0;
  p.align = r.get<Align>();
  p.window_left = r.get<int64_t>();
  p.window_right = r.get<int64_t>();
  p.scale = r.get<double>();
  p.softcap = r.get<double>();
  p.dout = r.get_vec<double>();
  get_problem_v2(r, p);
  return p;
}

void put_layer_call(Writer& w, const LayerWeights& lw, const LayerInput& x) {
  w.put(lw.d_model);
  for (const auto* m : {&lw.w_q, &lw.w_k, &lw.w_v, &lw.w_o}) w.put_vec(*m);
  w.put(x.dtype);
  for (int64_t n : {x.batch, x.tq, x.tk, x.heads}) w.put(n);
  w.put_vec(x.x_q);
  w.put_vec(x.x_kv);
  w.put_vec(x.key_valid);
  w.put<uint8_t>(x.causal);
  w.put(x.align);
}

std::pair<LayerWeights, LayerInput> get_layer_call(Reader& r) {
  LayerWeights lw;
  LayerInput x;
  lw.d_model = r.get<int64_t>();
  for (auto* m : {&lw.w_q, &lw.w_k, &lw.w_v, &lw.w_o}) *m = r.get_vec<double>();
  x.dtype = r.get<DType>();
  for (int64_t* n : {&x.batch, &x.tq, &x.tk, &x.heads}) *n = r.get<int64_t>();
  x.x_q = r.get_vec<double>();
  x.x_kv = r.get_vec<double>();
  x.key_valid = r.get_vec<uint8_t>();
  x.causal = r.get<uint8_t>() != 0;
  x.align = r.get<Align>();
  return {std::move(lw), std::move(x)};
}

void put_info(Writer& w, const ImplInfo& i) {
  w.put_str(i.name);
  w.put(i.kind);
  w.put(i.dtypes);
  w.put_vec(i.combos);
  w.put(i.features);
  w.put(i.empty_rows);
  w.put(i.precision);
  w.put(i.limits);
  w.put_str(i.description);
  w.put_str(i.caught_by);
  w.put_str(i.origin);
}

ImplInfo get_info(Reader& r) {
  ImplInfo i;
  i.name = r.get_str();
  i.kind = r.get<Kind>();
  i.dtypes = r.get<uint32_t>();
  i.combos = r.get_vec<DTypeCombo>();
  i.features = r.get<Features>();
  i.empty_rows = r.get<EmptyRowPolicy>();
  i.precision = r.get<PrecisionTraits>();
  i.limits = r.get<Limits>();
  i.description = r.get_str();
  i.caught_by = r.get_str();
  i.origin = r.get_str();
  return i;
}

enum Op : uint8_t { kForward = 1, kBackward = 2, kLayerRun = 3 };
enum Reply : uint8_t {
  kForwardResult = 0,
  kBackwardResult = 1,
  kContractError = 2,
  kThrew = 3,
  kLayerResult = 4,
  kForked = 5,      // the implementation forked during the call
  kDescribed = 6,   // a plugin's descriptors (describe mode)
  kInputError = 7,  // the plugin could not be loaded (describe mode)
  kReady = 8,       // the worker has built its implementation
  kReceived = 9,    // the worker has decoded the request; the call starts now
};

// argv[1] of a worker; argv[2] the harness's pid, argv[3] the mode
// ("builtin", "plugin", "describe" or a registered loader's), argv[4] the
// implementation's name (for "describe": the loader, "" for a plugin),
// argv[5] the file's path.
constexpr const char* kWorkerFlag = "--attncheck-worker";
// The worker's end of the socketpair.
constexpr int kWorkerFd = 3;
// The largest request a worker accepts: a garbage length ends it, never
// becomes an allocation.
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 36;

std::atomic<bool> worker_entry{false};
std::atomic<int> workers_alive{0};

// Writes the whole frame; false when the peer is gone. MSG_NOSIGNAL: a
// dead peer is an error return, not a SIGPIPE.
bool send_frame(int fd, const std::string& payload) {
  // The length, then the payload where it is (no copy: a request can be a
  // gigabyte).
  const uint64_t n = payload.size();
  const auto send_all = [fd](const char* data, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t k = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      done += static_cast<size_t>(k);
    }
    return true;
  };
  return send_all(reinterpret_cast<const char*>(&n), sizeof n) &&
         send_all(payload.data(), payload.size());
}

// Blocking read of n bytes; false at end of file or on an error.
bool read_exact(int fd, char* dst, size_t n) {
  while (n > 0) {
    const ssize_t k = ::read(fd, dst, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    dst += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// ---- The worker's side ----

// Set in the worker by pthread_atfork when the implementation forks: in the
// worker itself (prepare) and in the copy (child).
std::atomic<bool> forked{false};
pid_t worker_pid = 0;

void on_fork_prepare() { forked = true; }

// A reply, prefixed with the sender's process id. A copy made by a fork in
// the implementation never speaks: it leaves at once.
void reply(int fd, const Writer& w) {
  if (::getpid() != worker_pid) _exit(0);
  Writer framed;
  framed.put<int32_t>(worker_pid);
  std::string payload = framed.bytes() + w.bytes();
  if (!send_frame(fd, payload)) _exit(0);
}

Writer error_reply(Reply kind, const std::string& what) {
  Writer w;
  w.put<uint8_t>(kind);
  w.put_str(what);
  return w;
}

// Answers one request of the harness. `received` is called once the
// request is decoded, before the implementation runs: the call's time
// limits count from there (decoding a real-size problem is the harness's
// time, not the implementation's). The request's bytes are freed then;
// the decoded problem is left in `problem`, freed after the reply is sent
// (unmapping it is not the implementation's time either).
Writer answer(const Implementation& impl, std::string&& request,
              const std::function<void()>& received, std::optional<Problem>& problem) {
  Reader r(request);
  const auto op = r.get<uint8_t>();
  const auto decoded = [&] {
    std::string().swap(request);
    received();
  };
  Writer ok;
  if (op == kLayerRun) {
    const auto* layer = dynamic_cast<const Layer*>(&impl);
    if (!layer) throw std::runtime_error("the implementation does not implement attncheck::Layer");
    const auto [lw, x] = get_layer_call(r);
    decoded();
    const LayerResult y = layer->run(lw, x);
    ok.put<uint8_t>(kLayerResult);
    ok.put(y.status);
    ok.put_str(y.error);
    ok.put_vec(y.y);
    return ok;
  }
  const Problem& p = problem.emplace(get_problem(r));
  decoded();
  if (op == kForward) {
    const ForwardResult f = impl.forward(p);
    ok.put<uint8_t>(kForwardResult);
    ok.put(f.status);
    ok.put_str(f.error);
    ok.put_vec(f.out);
    ok.put_vec(f.weights);
    ok.put_vec(f.lse);
    ok.put<int64_t>(impl.score_elements_computed().value_or(-1));
    return ok;
  }
  const BackwardResult b = impl.backward(p);
  ok.put<uint8_t>(kBackwardResult);
  ok.put(b.status);
  ok.put_str(b.error);
  ok.put_vec(b.dq);
  ok.put_vec(b.dk);
  ok.put_vec(b.dv);
  ok.put_vec(b.dsink);
  return ok;
}

// Answers requests until the harness closes its end. Every exit is _exit:
// nothing of the program around the worker runs in it, nor in a copy.
[[noreturn]] void serve(int fd, const Implementation& impl) {
  for (;;) {
    uint64_t n = 0;
    if (!read_exact(fd, reinterpret_cast<char*>(&n), sizeof n)) _exit(0);
    if (n > kMaxFrameBytes) _exit(4);
    std::string request(n, '\0');
    if (!read_exact(fd, request.data(), n)) _exit(0);
    forked = false;
    Writer w;
    std::optional<Problem> problem;
    try {
      w = answer(
          impl, std::move(request),
          [fd] {
            Writer received;
            received.put<uint8_t>(kReceived);
            reply(fd, received);
          },
          problem);
    } catch (const PluginContractError& e) {
      w = error_reply(kContractError, e.what());
    } catch (const std::exception& e) {
      w = error_reply(kThrew, e.what());
    } catch (...) {
      w = error_reply(kThrew, "a non-standard exception");
    }
    if (forked && ::getpid() == worker_pid) {
      w = error_reply(kForked, "the implementation forked a process of its own during the call "
                               "(its copy returned into the harness's worker)");
    }
    reply(fd, w);
    problem.reset();
  }
}

// What a worker serves when it cannot build the implementation it was
// started for: every call fails with the reason.
class Missing final : public Implementation {
 public:
  explicit Missing(const std::string& name)
      : why_(fmt::format("the worker has no implementation '{}'", name)) {}
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem&) const override { throw std::runtime_error(why_); }
  BackwardResult backward(const Problem&) const override { throw std::runtime_error(why_); }

 private:
  std::string why_;
  ImplInfo info_;
};

// The loaders of foreign files registered in this worker (the Python
// bridge's "python"), by mode.
std::mutex loaders_mutex;
std::map<std::string, WorkerLoader>& worker_loaders() {
  static std::map<std::string, WorkerLoader> loaders;
  return loaders;
}

// Every implementation the file at `path` declares: a plugin's
// descriptors, or what the loader of `mode` builds from it.
std::vector<std::shared_ptr<const Implementation>> load_file(const std::string& mode,
                                                             const std::string& path) {
  if (mode.empty() || mode == "plugin") return load_plugin(path);
  WorkerLoader load;
  {
    std::lock_guard lock(loaders_mutex);
    const auto it = worker_loaders().find(mode);
    if (it != worker_loaders().end()) load = it->second;
  }
  if (!load) {
    throw InputError(fmt::format("{}: this worker program cannot load files of mode '{}'", path,
                                 mode));
  }
  return load(path);
}

// The implementation a worker serves: a built-in from the registry, or one
// of the implementations a plugin or a foreign file declares.
std::shared_ptr<const Implementation> build(const std::string& mode, const std::string& name,
                                            const std::string& path) {
  if (mode == "builtin") {
    if (auto impl = find_impl(name)) return impl;
    load_builtin_modules();  // an adapter: only its worker starts LibTorch
    return find_impl(name);
  }
  for (auto& impl : load_file(mode, path))
    if (impl->info().name == name) return impl;
  return nullptr;
}

int run_worker(int argc, char** argv) {
  if (argc != 6) return 2;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != static_cast<pid_t>(std::atoll(argv[2]))) return 0;  // orphaned already
  worker_pid = ::getpid();
  ::pthread_atfork(on_fork_prepare, nullptr, nullptr);
  const std::string mode = argv[3], name = argv[4], path = argv[5];
  try {
    if (mode == "describe") {
      Writer w;
      try {
        const auto impls = load_file(name, path);
        w.put<uint8_t>(kDescribed);
        w.put<uint64_t>(impls.size());
        for (const auto& impl : impls) put_info(w, impl->info());
      } catch (const InputError& e) {
        w = error_reply(kInputError, e.what());
      }
      reply(kWorkerFd, w);
      _exit(0);
    }
    const auto impl = build(mode, name, path);
    // Started: the time limits of calls count from here, not from the
    // program's start (a sanitizer's, LibTorch's) or the plugin's loading.
    Writer ready;
    ready.put<uint8_t>(kReady);
    reply(kWorkerFd, ready);
    // No such implementation here: serve one whose every call says so,
    // through the same loop.
    const Missing missing(name);
    serve(kWorkerFd, impl ? static_cast<const Implementation&>(*impl) : missing);
  } catch (...) {
    _exit(4);
  }
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* text = strsignal(sig);
  return fmt::format("signal {} (SIG{}: {})", sig, abbrev ? abbrev : "?", text ? text : "?");
}

// ---- The harness's side ----

// How the worker ended, from its wait status.
std::string how_it_ended(int status) {
  return WIFSIGNALED(status)
             ? "crashed with " + signal_text(WTERMSIG(status))
             : fmt::format("exited with status {} (an implementation must return, not exit)",
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/// One worker process and its channel.
class Worker {
 public:
  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { stop(); }

  bool running() const { return pid_ > 0; }

  // Spawns this program in worker mode (or `command`'s program, which
  // calls worker_main), in a process group of its own (a Ctrl-C at the
  // terminal reaches the harness, which reports what finished; stop()
  // kills the whole group, copies included).
  void start(const std::string& mode, const std::string& name, const std::string& path,
             const WorkerCommand* command = nullptr) {
    std::string exe;
    if (command) {
      exe = command->program;
    } else {
      if (!worker_entry) {
        throw std::logic_error("isolate: this program's main() does not call "
                               "attncheck::worker_main (attncheck/isolation.h)");
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
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
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
    const int rc = command ? ::posix_spawnp(&pid, exe.c_str(), &actions, &attr, argv.data(), envp.data())
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

  // Kills the worker's process group (the worker and any process it
  // forked) and reaps the worker.
  void stop() {
    if (pid_ <= 0) return;
    ::close(fd_);
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    forget();
  }

  // The worker closed its end: reap it, kill what is left of its group,
  // and say how it ended.
  std::string reap() {
    int status = 0;
    ::close(fd_);
    ::waitpid(pid_, &status, 0);
    ::kill(-pid_, SIGKILL);
    forget();
    return how_it_ended(status);
  }

  // CPU time the worker has used, in ms (0 when it cannot be read).
  double cpu_ms() const {
    timespec ts{};
    if (cpu_clock_ == clockid_t(-1) || ::clock_gettime(cpu_clock_, &ts) != 0) return 0;
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  }

  int fd() const { return fd_; }
  pid_t pid() const { return pid_; }

 private:
  void forget() {
    pid_ = -1;
    fd_ = -1;
    cpu_clock_ = clockid_t(-1);
    --workers_alive;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  clockid_t cpu_clock_ = clockid_t(-1);
};

// How a call to a worker ended when it did not return a reply.
struct Death {
  enum class Kind { died, hung, cancelled } kind;
  std::string message;
};

// The limits of one call.
struct CallLimits {
  double cpu_ms;   // CPU time, or 0 for none
  double wall_ms;  // wall time, or 0 for the blocked rule of the CPU limit
};

// Sends one request (none when `request` is null: a message the worker
// sends of itself) and waits for the reply (its sender's pid checked and
// removed) within the limits; a death instead of a reply.
std::variant<std::string, Death> exchange(Worker& worker, const std::string* request,
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
  // Until then the worker runs only this file's decoding, which ends (or
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

class IsolatedImpl : public IsolatedImplementation {
 public:
  // `local`: the same implementation in this process, when there is one
  // (built-ins); a layer's parameter_count is asked of it.
  // `command`: how to start the worker when it is not this program.
  IsolatedImpl(ImplInfo info, std::string mode, std::string path,
               std::shared_ptr<const Implementation> local, IsolationOptions options,
               std::optional<WorkerCommand> command = std::nullopt)
      : info_(std::move(info)),
        mode_(std::move(mode)),
        path_(std::move(path)),
        local_(std::move(local)),
        options_(options),
        command_(std::move(command)) {}

  const ImplInfo& info() const override { return info_; }

  void begin_property() const override {
    std::lock_guard lock(mutex_);
    hangs_ = crashes_ = 0;
    last_death_hung_ = false;
  }

  bool hung() const override {
    std::lock_guard lock(mutex_);
    return last_death_hung_;
  }

  ForwardResult forward(const Problem& p) const override {
    std::lock_guard lock(mutex_);
    if (over_budget()) return ForwardResult::unsupported();
    Writer w;
    w.put<uint8_t>(kForward);
    put_problem(w, p);
    const std::string reply = call(w.bytes(), "forward");
    Reader r(reply);
    if (const auto kind = r.get<uint8_t>(); kind != kForwardResult) rethrow(kind, r);
    ForwardResult f;
    f.status = r.get<Status>();
    f.error = r.get_str();
    f.out = r.get_vec<double>();
    f.weights = r.get_vec<double>();
    f.lse = r.get_vec<double>();
    const auto score = r.get<int64_t>();
    score_elements_ = score < 0 ? std::nullopt : std::optional<int64_t>(score);
    return f;
  }

  BackwardResult backward(const Problem& p) const override {
    std::lock_guard lock(mutex_);
    if (over_budget()) return BackwardResult::unsupported();
    Writer w;
    w.put<uint8_t>(kBackward);
    put_problem(w, p);
    const std::string reply = call(w.bytes(), "backward");
    Reader r(reply);
    if (const auto kind = r.get<uint8_t>(); kind != kBackwardResult) rethrow(kind, r);
    BackwardResult b;
    b.status = r.get<Status>();
    b.error = r.get_str();
    b.dq = r.get_vec<double>();
    b.dk = r.get_vec<double>();
    b.dv = r.get_vec<double>();
    b.dsink = r.get_vec<double>();
    return b;
  }

  std::optional<int64_t> score_elements_computed() const override { return score_elements_; }

 protected:
  LayerResult run_layer(const LayerWeights& lw, const LayerInput& x) const {
    std::lock_guard lock(mutex_);
    if (over_budget()) return {Status::unsupported, {}, {}};
    Writer w;
    w.put<uint8_t>(kLayerRun);
    put_layer_call(w, lw, x);
    const std::string reply = call(w.bytes(), "the layer's run");
    Reader r(reply);
    if (const auto kind = r.get<uint8_t>(); kind != kLayerResult) rethrow(kind, r);
    LayerResult y;
    y.status = r.get<Status>();
    y.error = r.get_str();
    y.y = r.get_vec<double>();
    return y;
  }

  const Implementation* local() const { return local_.get(); }

 private:
  // Past the death bound of the current property, the implementation is not
  // called: the call is UNSUPPORTED, a discarded case, so shrinking keeps
  // the last real death.
  bool over_budget() const {
    return hangs_ > kMaxHangsPerProperty || crashes_ > kMaxCrashesPerProperty;
  }

  [[noreturn]] void rethrow(uint8_t kind, Reader& r) const {
    // The implementation's own text: one line, bounded, no raw control
    // characters, whatever it threw.
    const std::string what = printable(r.get_str());
    if (kind == kContractError) throw PluginContractError(what);
    if (kind == kForked) {
      worker_.stop();
      ++crashes_;
      last_death_hung_ = false;
      throw ImplementationDied(what + "; the worker and its process group were stopped");
    }
    throw std::runtime_error(what);
  }

  // Starts the worker and waits until it has built the implementation,
  // within kWallTimeoutFactor x the CPU limit of wall time (as a plugin's
  // loading), so that its start-up never counts against a call's limit.
  void start_worker(const char* what, double cpu_limit) const {
    worker_.start(mode_, info_.name, path_, command_ ? &*command_ : nullptr);
    auto result = exchange(worker_, nullptr, {0, kWallTimeoutFactor * cpu_limit}, "start-up");
    std::string why;
    if (const auto* death = std::get_if<Death>(&result)) {
      if (death->kind == Death::Kind::cancelled) throw Cancelled();
      why = death->message;
    } else if (Reader r(std::get<std::string>(result)); r.get<uint8_t>() != kReady) {
      worker_.stop();
      why = "the worker's first message was not its start";
    } else {
      return;
    }
    ++crashes_;
    last_death_hung_ = false;
    throw ImplementationDied(fmt::format("the worker could not start for {}: {}", what, why));
  }

  std::string call(const std::string& request, const char* what) const {
    if (cancel_requested()) throw Cancelled();
    const double cpu = static_cast<double>(options_.timeout_ms);
    if (!worker_.running()) start_worker(what, cpu);
    auto result = exchange(worker_, &request, {cpu, 0}, what);
    if (auto* reply = std::get_if<std::string>(&result)) return std::move(*reply);
    const Death& death = std::get<Death>(result);
    if (death.kind == Death::Kind::cancelled) throw Cancelled();
    if (death.kind == Death::Kind::hung) {
      ++hangs_;
      last_death_hung_ = true;
    } else {
      ++crashes_;
      last_death_hung_ = false;
    }
    throw ImplementationDied(death.message);
  }

  ImplInfo info_;
  std::string mode_, path_;
  std::shared_ptr<const Implementation> local_;
  IsolationOptions options_;
  std::optional<WorkerCommand> command_;
  mutable std::mutex mutex_;
  mutable Worker worker_;
  mutable int hangs_ = 0, crashes_ = 0;
  mutable bool last_death_hung_ = false;
  mutable std::optional<int64_t> score_elements_;
};

// A layer's run() goes to the worker too; parameter_count is arithmetic on
// the declaration and is asked of this process's copy.
class IsolatedLayer final : public IsolatedImpl, public Layer {
 public:
  IsolatedLayer(ImplInfo info, std::shared_ptr<const Implementation> local, const Layer& layer,
                IsolationOptions options)
      : IsolatedImpl(std::move(info), "builtin", "", std::move(local), options), layer_(layer) {}

  int64_t parameter_count(int64_t d_model, int64_t heads) const override {
    return layer_.parameter_count(d_model, heads);
  }
  LayerResult run(const LayerWeights& w, const LayerInput& x) const override {
    return run_layer(w, x);
  }

 private:
  const Layer& layer_;  // inside the local implementation IsolatedImpl keeps alive
};

// The declarations of the file at `path` (a plugin when `mode` is
// "plugin", else a file of a registered loader's mode, in a worker started
// by `command`), read by a worker that loads it.
std::vector<std::shared_ptr<const Implementation>> describe_in_worker(
    const std::string& mode, const std::string& path, const WorkerCommand* command,
    IsolationOptions options) {
  if (cancel_requested()) throw Cancelled();
  const bool plugin = mode == "plugin";
  Worker worker;
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
  std::vector<std::shared_ptr<const Implementation>> impls;
  const auto n = r.get<uint64_t>();
  for (uint64_t k = 0; k < n; ++k) {
    ImplInfo info = get_info(r);
    impls.push_back(std::make_shared<IsolatedImpl>(
        std::move(info), mode, path, nullptr, options,
        command ? std::optional<WorkerCommand>(*command) : std::nullopt));
  }
  return impls;
}

}  // namespace

std::shared_ptr<const Implementation> isolate(std::shared_ptr<const Implementation> impl,
                                              IsolationOptions options) {
  if (dynamic_cast<const IsolatedImplementation*>(impl.get())) return impl;
  const ImplInfo& info = impl->info();
  if (info.kind == Kind::plugin) {
    return std::make_shared<IsolatedImpl>(info, "plugin", info.origin, std::move(impl), options);
  }
  if (find_impl(info.name) != impl) {
    throw std::logic_error(fmt::format("isolate: '{}' is not the registered implementation of "
                                       "that name, so a worker could not build it",
                                       info.name));
  }
  if (const auto* layer = dynamic_cast<const Layer*>(impl.get())) {
    return std::make_shared<IsolatedLayer>(info, impl, *layer, options);
  }
  return std::make_shared<IsolatedImpl>(info, "builtin", "", std::move(impl), options);
}

std::vector<std::shared_ptr<const Implementation>> load_plugins_isolated(
    const std::vector<std::string>& paths, IsolationOptions options) {
  return load_plugins(paths, [options](const std::string& path) {
    return describe_in_worker("plugin", path, nullptr, options);
  });
}

void register_worker_loader(const std::string& mode, WorkerLoader load) {
  if (mode == "builtin" || mode == "plugin" || mode == "describe" || mode.empty()) {
    throw std::invalid_argument("register_worker_loader: '" + mode + "' is a reserved mode");
  }
  std::lock_guard lock(loaders_mutex);
  worker_loaders()[mode] = std::move(load);
}

std::vector<std::shared_ptr<const Implementation>> load_isolated(const std::string& mode,
                                                                 const std::string& path,
                                                                 const WorkerCommand& command,
                                                                 IsolationOptions options) {
  return describe_in_worker(mode, path, &command, options);
}

std::optional<int> worker_main(int argc, char** argv) {
  worker_entry = true;
  if (argc < 2 || std::strcmp(argv[1], kWorkerFlag) != 0) return std::nullopt;
  return run_worker(argc, argv);
}

int live_workers() { return workers_alive; }

}  // namespace attncheck
