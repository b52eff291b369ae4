// The worker's side of isolation (host/worker.h): started by the harness
// with the worker flag, it builds the implementation it was started for (a
// built-in from the registry, a plugin by loading it, a file of a
// registered loader's mode) or describes a file's declarations, then
// serves requests over the channel of host/wire.h. Every reply carries the
// worker's process id, so a copy made by a fork in the implementation is
// told apart and never speaks.

#include "host/worker.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/dtype.h"
#include "host/containment.h"
#include "host/isolation.h"
#include "host/modules.h"
#include "host/plugin_loader.h"
#include "attncheck/registry.h"
#include "host/wire.h"

namespace attncheck {
namespace {

using namespace host_detail;  // the channel: frames, messages, their codec

std::atomic<bool> worker_entry{false};

// Set in the worker by pthread_atfork when the implementation forks: in the
// worker itself (prepare) and in the copy (child).
std::atomic<bool> forked{false};
pid_t worker_pid = 0;

void on_fork_prepare() { forked = true; }

// The id of the call being answered (host/wire.h): every reply carries it.
uint64_t call_id = 0;

// The memory limit this worker applied, in MiB (0: none).
long long memory_limit_mb = 0;

// A reply, prefixed with the sender's process id. A copy made by a fork in
// the implementation never speaks: it leaves at once.
void reply(int fd, const Writer& w) {
  if (::getpid() != worker_pid) _exit(0);
  Writer framed;
  framed.put<int32_t>(worker_pid);
  framed.put<uint64_t>(call_id);
  std::string payload = framed.bytes() + w.bytes();
  if (!send_frame(fd, payload)) _exit(channel_failure_exit());
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
              const std::function<void()>& received, std::unique_ptr<Problem>& problem) {
  Reader r(request);
  r.discard_as_read();  // the request is freed once decoded
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
    put_layer_result(ok, y);
    return ok;
  }
  problem = std::make_unique<Problem>(get_problem(r));
  const Problem& p = *problem;
  decoded();
  if (op == kForward) {
    const ForwardResult f = impl.forward(p);
    ok.put<uint8_t>(kForwardResult);
    put_forward_result(ok, f, impl.score_elements_computed());
    return ok;
  }
  const BackwardResult b = impl.backward(p);
  ok.put<uint8_t>(kBackwardResult);
  put_backward_result(ok, b);
  return ok;
}

// Answers requests until the harness closes its end. Every exit is _exit:
// nothing of the program around the worker runs in it, nor in a copy.
[[noreturn]] void serve(int fd, const Implementation& impl) {
  for (;;) {
    uint64_t n = 0;
    if (!read_exact(fd, reinterpret_cast<char*>(&n), sizeof n)) _exit(channel_failure_exit());
    if (n > kMaxFrameBytes || n < kCallIdBytes) _exit(4);
    if (!read_exact(fd, reinterpret_cast<char*>(&call_id), sizeof call_id)) {
      _exit(channel_failure_exit());
    }
    std::string request(n - kCallIdBytes, '\0');
    if (!read_exact(fd, request.data(), request.size())) _exit(channel_failure_exit());
    forked = false;
    Writer w;
    std::unique_ptr<Problem> problem;
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
    } catch (const std::bad_alloc&) {
      w = error_reply(kThrew, memory_limit_mb > 0
                                  ? fmt::format("ran out of memory (std::bad_alloc) within the "
                                                "worker's limit of {} MiB (--memory-limit-mb)",
                                                memory_limit_mb)
                                  : std::string("ran out of memory (std::bad_alloc)"));
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
    load_builtin_modules_for(name);  // an adapter: only its worker starts its module
    return find_impl(name);
  }
  for (auto& impl : load_file(mode, path))
    if (impl->info().name == name) return impl;
  return nullptr;
}

// The worker's own limits, before anything of the implementation runs: no
// core files (a crash is reported, not dumped into the user's folder), and
// the memory limit the harness passed (host/supervisor.h), except under a
// sanitizer, whose shadow memory it would count.
void limit_resources() {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  const char* mb = std::getenv(kWorkerMemoryVar);
  const long long limit = mb ? std::atoll(mb) : 0;
  if (!kSanitizedBuild && limit > 0) {
    memory_limit_mb = limit;
    const auto bytes = static_cast<rlim_t>(limit) << 20;
    const rlimit data{bytes, bytes};
    ::setrlimit(RLIMIT_DATA, &data);
    // The program's 64 MiB top pad (cli/main.cpp) counts against
    // RLIMIT_DATA untouched: an allocation then failed with the resident
    // peak far below the limit, which the harness reads to name the limit
    // as the likely cause (supervisor.cpp). glibc's default pad of 128 KiB
    // keeps them together; freed memory is still kept (the trim threshold).
    ::mallopt(M_TOP_PAD, 128 << 10);
  }
}

int run_worker(int argc, char** argv) {
  if (argc != 6) return 2;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const auto harness = static_cast<pid_t>(std::atoll(argv[2]));
  if (::getppid() != harness) return 0;  // orphaned already
  // From here on this is the kernel process, below the worker's relay, in
  // a PID namespace of its own where the kernel allows one, with no
  // capabilities; the relay and the init never come back.
  contain_worker(harness);
  limit_resources();
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
      // Alive until the harness is done with it: its relay ends whatever
      // the loading started once it exits, and the harness looks for that
      // first (a constructor's daemon refuses the file).
      char byte;
      while (::read(kWorkerFd, &byte, 1) > 0) {
      }
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

}  // namespace

bool host_detail::program_calls_worker_main() { return worker_entry; }

void register_worker_loader(const std::string& mode, WorkerLoader load) {
  if (mode == "builtin" || mode == "plugin" || mode == "describe" || mode.empty()) {
    throw std::invalid_argument("register_worker_loader: '" + mode + "' is a reserved mode");
  }
  std::lock_guard lock(loaders_mutex);
  worker_loaders()[mode] = std::move(load);
}

std::optional<int> worker_main(int argc, char** argv) {
  worker_entry = true;
  if (argc < 2 || std::strcmp(argv[1], kWorkerFlag) != 0) return std::nullopt;
  return run_worker(argc, argv);
}

}  // namespace attncheck
