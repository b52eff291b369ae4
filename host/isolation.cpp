// Implementations behind a child process (attncheck/isolation.h).
//
// One child per isolated implementation, forked when first needed and
// again after it died. The two ends talk over a socketpair in frames (a
// uint64 length, then the payload) of a small binary encoding: both ends
// are the same binary, so doubles travel bit for bit, NaN payloads and
// strides included.

#include "attncheck/isolation.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "attncheck/layer.h"
#include "attncheck/plugin_loader.h"

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

enum Op : uint8_t { kForward = 1, kBackward = 2, kLayerRun = 3 };
enum Reply : uint8_t {
  kForwardResult = 0,
  kBackwardResult = 1,
  kContractError = 2,
  kThrew = 3,
  kLayerResult = 4,
};

// Writes the whole frame; false when the peer is gone. MSG_NOSIGNAL: a
// dead peer is an error return, not a SIGPIPE.
bool send_frame(int fd, const std::string& payload) {
  std::string frame;
  const uint64_t n = payload.size();
  frame.append(reinterpret_cast<const char*>(&n), sizeof n);
  frame.append(payload);
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t k = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<size_t>(k);
  }
  return true;
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

// The child's side: answers requests until the parent closes its end.
[[noreturn]] void serve(int fd, const Implementation& impl) {
  for (;;) {
    uint64_t n = 0;
    if (!read_exact(fd, reinterpret_cast<char*>(&n), sizeof n)) _exit(0);
    std::string request(n, '\0');
    if (!read_exact(fd, request.data(), n)) _exit(0);
    Writer w;
    try {
      Reader r(request);
      const auto op = r.get<uint8_t>();
      if (op == kLayerRun) {
        const auto* layer = dynamic_cast<const Layer*>(&impl);
        if (!layer) throw std::runtime_error("the implementation does not implement attncheck::Layer");
        const auto [lw, x] = get_layer_call(r);
        const LayerResult y = layer->run(lw, x);
        Writer ok;
        ok.put<uint8_t>(kLayerResult);
        ok.put(y.status);
        ok.put_str(y.error);
        ok.put_vec(y.y);
        w = std::move(ok);
        if (!send_frame(fd, w.bytes())) _exit(0);
        continue;
      }
      const Problem p = get_problem(r);
      if (op == kForward) {
        const ForwardResult f = impl.forward(p);
        Writer ok;
        ok.put<uint8_t>(kForwardResult);
        ok.put(f.status);
        ok.put_str(f.error);
        ok.put_vec(f.out);
        ok.put_vec(f.weights);
        ok.put_vec(f.lse);
        ok.put<int64_t>(impl.score_elements_computed().value_or(-1));
        w = std::move(ok);
      } else {
        const BackwardResult b = impl.backward(p);
        Writer ok;
        ok.put<uint8_t>(kBackwardResult);
        ok.put(b.status);
        ok.put_str(b.error);
        ok.put_vec(b.dq);
        ok.put_vec(b.dk);
        ok.put_vec(b.dv);
        ok.put_vec(b.dsink);
        w = std::move(ok);
      }
    } catch (const PluginContractError& e) {
      w = Writer();
      w.put<uint8_t>(kContractError);
      w.put_str(e.what());
    } catch (const std::exception& e) {
      w = Writer();
      w.put<uint8_t>(kThrew);
      w.put_str(e.what());
    } catch (...) {
      w = Writer();
      w.put<uint8_t>(kThrew);
      w.put_str("a non-standard exception");
    }
    if (!send_frame(fd, w.bytes())) _exit(0);
  }
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* text = strsignal(sig);
  return fmt::format("signal {} (SIG{}: {})", sig, abbrev ? abbrev : "?", text ? text : "?");
}

class IsolatedImpl : public Implementation {
 public:
  IsolatedImpl(std::shared_ptr<const Implementation> impl, IsolationOptions options)
      : impl_(std::move(impl)), options_(options) {}

  ~IsolatedImpl() override { stop(); }

  const ImplInfo& info() const override { return impl_->info(); }

  ForwardResult forward(const Problem& p) const override {
    std::lock_guard lock(mutex_);
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

 private:
  [[noreturn]] static void rethrow(uint8_t kind, Reader& r) {
    const std::string what = r.get_str();
    if (kind == kContractError) throw PluginContractError(what);
    throw std::runtime_error(what);
  }

  void start() const {
    // Buffered output would otherwise be written twice, once by each.
    std::fflush(nullptr);
    std::cout.flush();
    std::cerr.flush();
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      throw std::runtime_error(fmt::format("isolation: socketpair: {}", std::strerror(errno)));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      throw std::runtime_error(fmt::format("isolation: fork: {}", std::strerror(errno)));
    }
    if (pid == 0) {
      ::close(sv[0]);
      // Its own process group: a Ctrl-C at the terminal reaches the
      // harness, which reports what finished, not the child mid-call.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(0);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      serve(sv[1], *impl_);
    }
    ::close(sv[1]);
    fd_ = sv[0];
    pid_ = pid;
    if (::clock_getcpuclockid(pid_, &cpu_clock_) != 0) cpu_clock_ = -1;
  }

  void stop() const {
    if (pid_ <= 0) return;
    ::close(fd_);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    fd_ = -1;
  }

  // CPU time the child has used, in ms (0 when it cannot be read).
  double cpu_ms() const {
    timespec ts{};
    if (cpu_clock_ == clockid_t(-1) || ::clock_gettime(cpu_clock_, &ts) != 0) return 0;
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  }

  // Reaps a child that closed its end and says how it ended.
  [[noreturn]] void died(const char* what) const {
    int status = 0;
    ::close(fd_);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    fd_ = -1;
    const std::string how =
        WIFSIGNALED(status)
            ? "crashed with " + signal_text(WTERMSIG(status))
            : fmt::format("exited with status {} (an implementation must return, not exit)",
                          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    throw ImplementationDied(fmt::format("the implementation {} during {} (it ran in a child "
                                         "process; the next call starts a fresh one)",
                                         how, what));
  }

  [[noreturn]] void timed_out(const char* what, const std::string& why) const {
    stop();
    throw ImplementationDied(fmt::format("{} did not return: {}; the child process was killed "
                                         "(a hang, or raise --timeout-ms)",
                                         what, why));
  }

  // Sends one request and waits for the reply within the limits.
  std::string call(const std::string& request, const char* what) const {
    if (pid_ <= 0) start();
    const double cpu_start = cpu_ms();
    const auto wall_start = std::chrono::steady_clock::now();
    if (!send_frame(fd_, request)) died(what);
    std::string buf;
    uint64_t need = sizeof(uint64_t);
    bool have_header = false;
    char chunk[1 << 16];
    for (;;) {
      pollfd pfd{fd_, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, 20);
      if (ready > 0) {
        const ssize_t k = ::read(fd_, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) died(what);
        buf.append(chunk, static_cast<size_t>(k));
        if (!have_header && buf.size() >= sizeof(uint64_t)) {
          std::memcpy(&need, buf.data(), sizeof need);
          need += sizeof(uint64_t);
          have_header = true;
        }
        if (have_header && buf.size() >= need) return buf.substr(sizeof(uint64_t));
      } else if (ready < 0 && errno != EINTR) {
        died(what);
      }
      const double cpu = cpu_ms() - cpu_start;
      if (cpu > static_cast<double>(options_.timeout_ms)) {
        timed_out(what, fmt::format("it used more than {} ms of CPU time (--timeout-ms)",
                                    options_.timeout_ms));
      }
      const auto wall = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - wall_start)
                            .count();
      // Blocked, not starved: a call that waits for a core on a loaded
      // machine still gets about cores / load of one, far above this share.
      if (wall > static_cast<double>(kWallTimeoutFactor * options_.timeout_ms) &&
          cpu < kBlockedCpuShare * wall) {
        timed_out(what, fmt::format("it was blocked for {:.0f} ms of wall time (over {} x "
                                    "--timeout-ms) while using {:.0f} ms of CPU time",
                                    wall, kWallTimeoutFactor, cpu));
      }
    }
  }

  std::shared_ptr<const Implementation> impl_;
  IsolationOptions options_;
  mutable std::mutex mutex_;
  mutable pid_t pid_ = -1;
  mutable int fd_ = -1;
  mutable clockid_t cpu_clock_ = clockid_t(-1);
  mutable std::optional<int64_t> score_elements_;
};

// A layer's run() goes to the child too; parameter_count is arithmetic on
// the declaration and is asked of the parent's copy.
class IsolatedLayer final : public IsolatedImpl, public Layer {
 public:
  IsolatedLayer(std::shared_ptr<const Implementation> impl, const Layer& layer,
                IsolationOptions options)
      : IsolatedImpl(std::move(impl), options), layer_(layer) {}

  int64_t parameter_count(int64_t d_model, int64_t heads) const override {
    return layer_.parameter_count(d_model, heads);
  }
  LayerResult run(const LayerWeights& w, const LayerInput& x) const override {
    return run_layer(w, x);
  }

 private:
  const Layer& layer_;  // inside the implementation IsolatedImpl keeps alive
};

}  // namespace

std::shared_ptr<const Implementation> isolate(std::shared_ptr<const Implementation> impl,
                                              IsolationOptions options) {
  if (const auto* layer = dynamic_cast<const Layer*>(impl.get())) {
    return std::make_shared<IsolatedLayer>(impl, *layer, options);
  }
  return std::make_shared<IsolatedImpl>(std::move(impl), options);
}

}  // namespace attncheck
