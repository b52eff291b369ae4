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

#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/cancel.h"
#include "attncheck/layer.h"
#include "host/plugin_loader.h"
#include "attncheck/registry.h"
#include "core/text.h"
#include "host/plugin_names.h"
#include "host/supervisor.h"
#include "host/wire.h"

namespace attncheck {
namespace {

using namespace host_detail;  // the channel and the worker process

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
    return get_forward_result(r, score_elements_);
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
    return get_backward_result(r);
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
    return get_layer_result(r);
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
  mutable WorkerProcess worker_;
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
