// Implementations behind a worker process (host/isolation.h): each
// call of an IsolatedImpl goes to its worker over the channel of
// host/wire.h, and a worker that dies, hangs or forks becomes
// ImplementationDied within a death budget per property. One worker per
// isolated implementation, spawned (host/supervisor.h) when first needed
// and again after it died; the worker's side is host/worker.cpp.
//
// Loading plugins in workers goes one way: load_plugins_isolated asks the
// supervisor to describe each file in a worker (which loads it with
// load_plugin), wraps each declaration as an IsolatedImpl and checks the
// names as load_plugins does (host/plugin_names.h).

#include "host/isolation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/cancel.h"
#include "attncheck/layer.h"
#include "host/plugin_loader.h"
#include "attncheck/registry.h"
#include "core/text.h"
#include "host/plugin_names.h"
#include "host/process_tree.h"
#include "host/supervisor.h"
#include "host/wire.h"

namespace attncheck {
namespace {

using namespace host_detail;  // the channel and the worker process

class IsolatedImpl;

// The implementations with a worker, least recently called first: at most
// kMaxLiveWorkers workers live at once (each holds two descriptors of this
// process), so a run of hundreds of implementations never runs out of file
// descriptors; starting one more stops the least recently called idle one
// (it starts again when next called).
std::mutex live_mutex;
std::list<const IsolatedImpl*>& live_workers_lru() {
  static std::list<const IsolatedImpl*> lru;
  return lru;
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

  ~IsolatedImpl() override {
    {
      std::lock_guard lock(live_mutex);
      live_workers_lru().remove(this);
    }
    stop_idle_worker();
  }

  const ImplInfo& info() const override { return info_; }

  void begin_property() const override {
    std::lock_guard lock(mutex_);
    earlier_hangs_ += hangs_;
    hangs_ = crashes_ = 0;
    last_death_hung_ = false;
  }

  bool hung() const override {
    std::lock_guard lock(mutex_);
    return last_death_hung_;
  }

  bool out_of_hangs() const override {
    std::lock_guard lock(mutex_);
    return earlier_hangs_ + hangs_ >= kMaxHangsPerRun;
  }

  int hangs_in_run() const override {
    std::lock_guard lock(mutex_);
    return earlier_hangs_ + hangs_;
  }

  void set_hangs_in_run(int hangs) const override {
    std::lock_guard lock(mutex_);
    earlier_hangs_ = hangs;
    hangs_ = 0;
  }

  // stop_idle_workers(): the worker stops when no call holds it.
  void stop_if_idle() const {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (lock.owns_lock()) stop_idle_worker();
  }

  ForwardResult forward(const Problem& p) const override {
    std::lock_guard lock(mutex_);
    if (over_budget()) return ForwardResult::unsupported();
    Writer w;
    w.borrow_large_arrays();  // p outlives the call: its tensors are sent where they are
    w.put<uint8_t>(kForward);
    put_problem(w, p);
    const std::string reply = call(w, "forward", reply_bound(p, w.size()));
    return decoded("forward", [&] {
      Reader r(reply);
      if (const auto kind = r.get<uint8_t>(); kind != kForwardResult) rethrow(kind, r);
      ForwardResult f = get_forward_result(r, score_elements_);
      r.expect_end();
      return f;
    });
  }

  BackwardResult backward(const Problem& p) const override {
    std::lock_guard lock(mutex_);
    if (over_budget()) return BackwardResult::unsupported();
    Writer w;
    w.borrow_large_arrays();
    w.put<uint8_t>(kBackward);
    put_problem(w, p);
    const std::string reply = call(w, "backward", reply_bound(p, w.size()));
    return decoded("backward", [&] {
      Reader r(reply);
      if (const auto kind = r.get<uint8_t>(); kind != kBackwardResult) rethrow(kind, r);
      BackwardResult b = get_backward_result(r);
      r.expect_end();
      return b;
    });
  }

  std::optional<int64_t> score_elements_computed() const override { return score_elements_; }

 protected:
  LayerResult run_layer(const LayerWeights& lw, const LayerInput& x) const {
    std::lock_guard lock(mutex_);
    if (over_budget()) return {Status::unsupported, {}, {}};
    Writer w;
    w.put<uint8_t>(kLayerRun);
    put_layer_call(w, lw, x);
    // A layer's output is [batch][tq][d_model], smaller than its input.
    const std::string reply = call(w, "the layer's run", w.size() + kMaxTextBytes);
    return decoded("the layer's run", [&] {
      Reader r(reply);
      if (const auto kind = r.get<uint8_t>(); kind != kLayerResult) rethrow(kind, r);
      LayerResult y = get_layer_result(r);
      r.expect_end();
      return y;
    });
  }

  const Implementation* local() const { return local_.get(); }

 private:
  // Past the death bound of the current property (tighter once an earlier
  // property hung), or the run's bound on hangs, the implementation is not
  // called: the call is UNSUPPORTED, a discarded case, so shrinking keeps
  // the last real death.
  bool over_budget() const {
    const int hangs = earlier_hangs_ ? kMaxHangsPerPropertyAfterAHang : kMaxHangsPerProperty;
    return hangs_ > hangs || crashes_ > kMaxCrashesPerProperty ||
           earlier_hangs_ + hangs_ >= kMaxHangsPerRun;
  }

  // The largest reply a call on `p` can produce: out, weights and lse of a
  // forward ([rows][dv], [rows][tk], [rows] for rows = batch x heads x tq),
  // or the gradients of a backward (at most the sizes of q, k, v, the sinks),
  // as doubles, with an error text and the fields around them. A longer
  // frame is malformed before it is buffered.
  static uint64_t reply_bound(const Problem& p, size_t request_bytes) {
    const auto rows = static_cast<uint64_t>(std::max<int64_t>(p.batch, 1)) *
                      static_cast<uint64_t>(std::max<int64_t>(p.heads, 1)) *
                      static_cast<uint64_t>(std::max<int64_t>(p.tq, 1));
    const uint64_t forward = rows * (static_cast<uint64_t>(std::max<int64_t>(p.dv, 1)) +
                                     static_cast<uint64_t>(std::max<int64_t>(p.tk, 1)) + 1);
    const uint64_t backward = p.q.data.size() + p.k.data.size() + p.v.data.size() + p.sink.size();
    return sizeof(double) * std::max(forward, backward) + request_bytes / 8 + kMaxTextBytes;
  }

  // Decodes a reply; one that is not what the wire says a reply is (a status
  // that is none of Status's, bytes left over, arrays cut short: the
  // implementation wrote to the worker's channel) ends the worker and the
  // call as a death, never reaches the properties.
  template <typename Decode>
  std::invoke_result_t<Decode> decoded(const char* what, Decode decode) const {
    try {
      return decode();
    } catch (const WireError& e) {
      worker_.stop();
      ++crashes_;
      last_death_hung_ = false;
      throw ImplementationDied(fmt::format("the worker sent a malformed reply during {} ({}; "
                                           "something in it wrote to its channel)",
                                           what, e.what()));
    }
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
    if (kind != kThrew) throw WireError(fmt::format("a reply of kind {}", kind));
    throw std::runtime_error(what);
  }

  // Starts the worker and waits until it has built the implementation,
  // within kWallTimeoutFactor x the CPU limit of wall time (as a plugin's
  // loading) and at least kMinStartUpWallMs, so that its start-up never
  // counts against a call's limit.
  void start_worker(const char* what, double cpu_limit) const {
    make_room();
    worker_.start(mode_, info_.name, path_, command_ ? &*command_ : nullptr,
                  worker_memory_limit_mb(options_.memory_limit_mb));
    const double wall = std::max(kWallTimeoutFactor * cpu_limit, kMinStartUpWallMs);
    auto result = exchange(worker_, nullptr, {0, wall}, "start-up", kMaxDescribeReplyBytes);
    std::string why;
    if (const auto* death = std::get_if<Death>(&result)) {
      if (death->kind == Death::Kind::cancelled) throw Cancelled();
      why = death->message;
    } else if (Reader r(std::get<std::string>(result)); r.get<uint8_t>() != kReady) {
      worker_.stop();
      why = "the worker's first message was not its start";
    } else if (why = left_running("start-up"); why.empty()) {
      return;
    }
    ++crashes_;
    last_death_hung_ = false;
    throw ImplementationDied(fmt::format("the worker could not start for {}: {}", what, why));
  }

  // Processes the implementation started that are still running after
  // `what` returned (a fork, a posix_spawn, a daemon, in any session or
  // process group): killed with the worker; the text says so, "" when
  // there are none.
  std::string left_running(const char* what) const {
    const std::vector<pid_t> left = worker_.descendants();
    if (left.empty()) return {};
    const std::string output = worker_.take_output();
    worker_.stop();
    return fmt::format("the implementation left {}: it forked, spawned or daemonized); {} "
                       "and the worker were killed{}",
                       host_detail::processes_running(left, fmt::format("after {}", what)),
                       left.size() == 1 ? "it" : "they", output);
  }

  // Called with mutex_ held, before this implementation starts a worker:
  // stops the least recently called idle workers of other implementations
  // until fewer than kMaxLiveWorkers live (one busy in another thread is
  // skipped: try_lock never waits, so two starting at once cannot
  // deadlock), and puts this one last.
  void make_room() const {
    std::lock_guard lock(live_mutex);
    auto& lru = live_workers_lru();
    lru.remove(this);
    size_t live = lru.size();
    for (auto it = lru.begin(); it != lru.end() && live >= kMaxLiveWorkers;) {
      const IsolatedImpl* other = *it;
      std::unique_lock other_lock(other->mutex_, std::try_to_lock);
      if (!other_lock.owns_lock()) {
        ++it;
        continue;
      }
      other->stop_idle_worker();
      it = lru.erase(it);
      --live;
    }
    lru.push_back(this);
  }

  // Stops a worker between calls. What it started and left running since
  // its last call (a process spawned by a thread of its own) is killed
  // with it, and said on stderr, naming the implementation: no call is
  // there to fail.
  void stop_idle_worker() const {
    if (const int left = worker_.stop(); left > 0) {
      fmt::print(stderr,
                 "attncheck: warning: implementation '{}' left {} process{} running after its "
                 "last call; killed\n",
                 info_.name, left, left == 1 ? "" : "es");
    }
  }

  // This implementation was just called: last to be stopped for room.
  void touch() const {
    std::lock_guard lock(live_mutex);
    auto& lru = live_workers_lru();
    const auto it = std::find(lru.begin(), lru.end(), this);
    if (it != lru.end()) lru.splice(lru.end(), lru, it);
  }

  std::string call(const Writer& request, const char* what, uint64_t max_reply) const {
    if (cancel_requested()) throw Cancelled();
    const double cpu = static_cast<double>(options_.timeout_ms);
    if (!worker_.running()) start_worker(what, cpu);
    touch();
    auto result = exchange(worker_, &request, {cpu, 0}, what, max_reply);
    if (auto* reply = std::get_if<std::string>(&result)) {
      if (const std::string left = left_running(what); !left.empty()) {
        ++crashes_;
        last_death_hung_ = false;
        throw ImplementationDied(left);
      }
      return std::move(*reply);
    }
    const Death& death = std::get<Death>(result);
    if (death.kind == Death::Kind::cancelled) throw Cancelled();
    if (death.kind == Death::Kind::hung) {
      ++hangs_;
      last_death_hung_ = true;
    } else {
      ++crashes_;
      last_death_hung_ = false;
    }
    throw ImplementationDied(death.message, death.signal);
  }

  ImplInfo info_;
  std::string mode_, path_;
  std::shared_ptr<const Implementation> local_;
  IsolationOptions options_;
  std::optional<WorkerCommand> command_;
  mutable std::mutex mutex_;
  mutable WorkerProcess worker_;
  mutable int hangs_ = 0, crashes_ = 0;
  mutable int earlier_hangs_ = 0;  // the hangs of the run's earlier properties
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

// An isolated implementation per declaration of the file at `path`,
// read by a describe worker; their calls go to workers of `mode` started
// the same way.
std::vector<std::shared_ptr<const Implementation>> isolated_impls(const std::string& mode,
                                                                  const std::string& path,
                                                                  const WorkerCommand* command,
                                                                  IsolationOptions options) {
  std::vector<std::shared_ptr<const Implementation>> impls;
  for (ImplInfo& info : describe_in_worker(mode, path, command, options)) {
    impls.push_back(std::make_shared<IsolatedImpl>(
        std::move(info), mode, path, nullptr, options,
        command ? std::optional<WorkerCommand>(*command) : std::nullopt));
  }
  return impls;
}

}  // namespace

void stop_idle_workers() {
  std::vector<const IsolatedImpl*> live;
  {
    std::lock_guard lock(live_mutex);
    live.assign(live_workers_lru().begin(), live_workers_lru().end());
  }
  for (const IsolatedImpl* impl : live) impl->stop_if_idle();
}

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
  std::vector<std::shared_ptr<const Implementation>> all;
  host_detail::PluginNames names;
  for (const std::string& path : paths) {
    auto impls = isolated_impls("plugin", path, nullptr, options);
    names.add(path, impls);
    for (auto& impl : impls) all.push_back(std::move(impl));
  }
  return all;
}

std::vector<std::shared_ptr<const Implementation>> load_isolated(const std::string& mode,
                                                                 const std::string& path,
                                                                 const WorkerCommand& command,
                                                                 IsolationOptions options) {
  return isolated_impls(mode, path, &command, options);
}

}  // namespace attncheck
