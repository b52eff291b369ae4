// A plugin's descriptor as an Implementation (make_plugin_impl of
// host/plugin_loader.h): each call marshals the problem into the C ABI
// of the descriptor's version, hands the plugin guarded buffers, checks
// what it wrote and maps its return code, and after a successful forward
// asks the plugin which of its paths the call took.

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "attncheck/dtype.h"
#include "host/plugin_loader.h"
#include "host/abi_marshal.h"
#include "host/guarded_array.h"

namespace attncheck {
namespace {

using host_detail::Abi;
using host_detail::contiguous;
using host_detail::GuardedArray;
using host_detail::Shape;

template <uint32_t Version>
class PluginImpl : public Implementation {
 public:
  PluginImpl(const typename Abi<Version>::Descriptor& d, const std::string& origin,
             std::shared_ptr<void> keep_alive)
      : desc_(d),
        keep_alive_(std::move(keep_alive)),
        info_(host_detail::declared_info(d, origin)),
        who_(fmt::format("plugin implementation '{}' ({})", info_.name, origin)) {}

  const ImplInfo& info() const override { return info_; }

  ForwardResult forward(const Problem& given) const override {
    check_declared(given);
    std::lock_guard lock(mutex_);
    Call call;
    begin(given, call);
    const Problem& p = *call.p;
    const host_detail::OutputLayout layout = host_detail::output_layout(p, call.strided);
    GuardedArray out("out", p.dtype, layout.out_shape, layout.out_strides);
    std::optional<GuardedArray> weights, lse;
    // SPEC 1.1: packed queries return no weights.
    if (info_.has(ATTNCHECK_FEATURE_WEIGHTS) && !p.packed_q()) {
      const Shape s{p.batch, p.heads, p.tq, p.tk};
      weights.emplace("weights", DType::f64, s, contiguous(s));
    }
    if (info_.has(ATTNCHECK_FEATURE_LSE)) {
      lse.emplace("lse", DType::f64, layout.lse_shape, contiguous(layout.lse_shape));
    }
    std::vector<GuardedArray*> written{&out};
    if (weights) written.push_back(&*weights);
    if (lse) written.push_back(&*lse);
    typename Abi<Version>::Outputs co;
    std::memset(&co, 0, sizeof co);
    co.out = out.data();
    host_detail::copy_strides(co.out_strides, layout.abi_out_strides);
    co.weights = weights ? static_cast<double*>(weights->data()) : nullptr;
    co.lse = lse ? static_cast<double*>(lse->data()) : nullptr;

    const int code = desc_.forward(desc_.ctx, &call.marshalled->c, &co);

    ForwardResult r;
    if (!returned(call, "forward", code, co, written, r)) return r;
    r.out = out.values();
    if (weights) r.weights = weights->values();
    if (lse) r.lse = lse->values();
    r.path = last_path();
    keep(call, written);
    return r;
  }

  BackwardResult backward(const Problem& given) const override {
    if (!info_.has(ATTNCHECK_FEATURE_BACKWARD) || !desc_.backward) {
      return Implementation::backward(given);
    }
    check_declared(given);
    std::lock_guard lock(mutex_);
    Call call;
    begin(given, call);
    const Problem& p = *call.p;
    host_detail::MarshalledProblem<Version>& cp = *call.marshalled;
    typename Abi<Version>::Grads grads;
    std::memset(&grads, 0, sizeof grads);
    grads.dout = cp.add_dout(host_detail::encode(p.dtype, p.dout), p.dtype);
    // SPEC 1.1: dout and dq packed like q, dk and dv like k.
    const int64_t q_rows = p.total_q();
    const int64_t k_rows = p.packed_k() ? p.packed->cu_seqlens_k.back() : 0;
    host_detail::copy_strides(grads.dout_strides,
                              p.packed_q() ? Shape{0, p.dv, p.heads * p.dv, 1}
                                           : contiguous({p.batch, p.heads, p.tq, p.dv}));
    const Shape q_shape =
        p.packed_q() ? Shape{1, q_rows, p.heads, p.dk} : Shape{p.batch, p.heads, p.tq, p.dk};
    const Shape k_shape =
        p.packed_k() ? Shape{1, k_rows, p.kv_heads, p.dk} : Shape{p.batch, p.kv_heads, p.tk, p.dk};
    const Shape v_shape =
        p.packed_k() ? Shape{1, k_rows, p.kv_heads, p.dv} : Shape{p.batch, p.kv_heads, p.tk, p.dv};
    GuardedArray dq("dq", p.dtype, q_shape, contiguous(q_shape));
    GuardedArray dk("dk", p.dtype, k_shape, contiguous(k_shape));
    GuardedArray dv("dv", p.dtype, v_shape, contiguous(v_shape));
    grads.dq = dq.data();
    grads.dk = dk.data();
    grads.dv = dv.data();
    std::vector<GuardedArray*> written{&dq, &dk, &dv};
    std::optional<GuardedArray> dsink;
    if constexpr (Version >= 2) {
      if (!p.sink.empty()) {
        const Shape s{1, 1, 1, p.heads};
        dsink.emplace("dsink", DType::f64, s, contiguous(s));
        grads.dsink = static_cast<double*>(dsink->data());
        written.push_back(&*dsink);
      }
    }
    // Backward's outputs carry only the error message.
    typename Abi<Version>::Outputs co;
    std::memset(&co, 0, sizeof co);

    const int code = desc_.backward(desc_.ctx, &cp.c, &grads, &co);

    BackwardResult r;
    if (!returned(call, "backward", code, co, written, r)) return r;
    r.dq = dq.values();
    r.dk = dk.values();
    r.dv = dv.values();
    if (dsink) r.dsink = dsink->values();
    keep(call, written);
    return r;
  }

 private:
  // One call of forward or backward, from begin to keep, with the mutex
  // held: the problem as the plugin sees it (contiguous unless it declares
  // strides) and its marshalled inputs.
  struct Call {
    Problem contiguous;  // given.contiguous(), when the plugin takes no strides
    const Problem* p = nullptr;
    bool strided = false;
    std::unique_ptr<host_detail::MarshalledProblem<Version>> marshalled;
  };

  // Before the plugin's call: the earlier calls' buffers checked, and the
  // problem made contiguous if need be and marshalled into `call`.
  void begin(const Problem& given, Call& call) const {
    check_retired();
    call.strided = info_.has(ATTNCHECK_FEATURE_STRIDES);
    call.p = call.strided ? &given : &(call.contiguous = given.contiguous());
    call.marshalled = std::make_unique<host_detail::MarshalledProblem<Version>>(*call.p);
  }

  // After the plugin's call (`what`) returned `code`: the earlier calls'
  // buffers, the inputs and the outputs' guards checked, then the code
  // mapped. True for ATTNCHECK_OK, its outputs all written; false with r's
  // status (and the plugin's message) for ATTNCHECK_ERROR and
  // ATTNCHECK_UNSUPPORTED; any other code breaks the contract.
  template <typename Result>
  bool returned(const Call& call, const char* what, int code,
                const typename Abi<Version>::Outputs& co, const std::vector<GuardedArray*>& written,
                Result& r) const {
    check_retired();
    call.marshalled->check_inputs(who_);
    for (const GuardedArray* g : written) g->check_guards(who_);
    switch (code) {
      case ATTNCHECK_OK:
        break;
      case ATTNCHECK_ERROR:
        r.status = Status::error;
        r.error = host_detail::plugin_error_message(co.error, sizeof co.error);
        return false;
      case ATTNCHECK_UNSUPPORTED:
        r.status = Status::unsupported;
        return false;
      default:
        throw PluginContractError(host_detail::bad_return_code(who_, what, code));
    }
    for (const GuardedArray* g : written) g->check_written(who_);
    return true;
  }

  // After an ATTNCHECK_OK call whose values were read: its buffers kept
  // (retire).
  void keep(Call& call, const std::vector<GuardedArray*>& written) const {
    std::vector<GuardedArray> outputs;
    for (GuardedArray* g : written) outputs.push_back(std::move(*g));
    retire(std::move(call.marshalled), std::move(outputs));
  }

  // The buffers of the calls that returned ATTNCHECK_OK in the last
  // kRetiredMs (at least the latest one; at most kRetiredBytes in all
  // beyond it), kept, not freed, and checked before and after each call: a
  // write into them after their call returned (a thread the plugin left
  // running) is caught and named as such, instead of landing in freed
  // memory, or in a later call's buffers, where it would read as that call
  // writing to its input.
  struct Retired {
    std::unique_ptr<host_detail::MarshalledProblem<Version>> inputs;
    std::vector<GuardedArray> outputs;
    std::chrono::steady_clock::time_point at;
    size_t bytes = 0;
  };
  // 100 ms covers a logging or cleanup thread's delay; 16 MiB keeps the
  // cost of checking them on every call to a memory copy's.
  static constexpr auto kRetiredMs = std::chrono::milliseconds(100);
  static constexpr size_t kRetiredBytes = size_t{16} << 20;

  void retire(std::unique_ptr<host_detail::MarshalledProblem<Version>> inputs,
              std::vector<GuardedArray> outputs) const {
    Retired r{std::move(inputs), std::move(outputs), std::chrono::steady_clock::now(), 0};
    for (GuardedArray& g : r.outputs) {
      g.freeze();
      r.bytes += g.bytes();
    }
    r.bytes += r.inputs->bytes();
    retired_.push_back(std::move(r));
    size_t total = 0;
    for (const Retired& x : retired_) total += x.bytes;
    while (retired_.size() > 1 && (total - retired_.back().bytes > kRetiredBytes ||
                                   retired_.front().at + kRetiredMs < retired_.back().at)) {
      total -= retired_.front().bytes;
      retired_.pop_front();
    }
  }

  // Called with the mutex held, before a call and after it returns.
  void check_retired() const {
    const std::string who = who_ + " (a thread still running after its previous call returned)";
    try {
      for (const Retired& r : retired_) {
        r.inputs->check_inputs(who);
        for (const GuardedArray& g : r.outputs) g.check_frozen(who);
      }
    } catch (...) {
      retired_.clear();
      throw;
    }
  }

  // SPEC 4.1 and 5.1: after a forward that returned ATTNCHECK_OK, the path
  // that call took, asked of the descriptor's last_path (with the mutex
  // still held: "the latest forward on ctx" is this one); -1 when the
  // descriptor has no last_path (or its struct_size does not reach it). An
  // answer outside -1 .. n_paths - 1 is an error of the call.
  int last_path() const {
    if constexpr (Version >= 2) {
      if (!host_detail::covers(desc_, offsetof(attncheck_impl, last_path),
                               sizeof desc_.last_path) ||
          !desc_.last_path) {
        return -1;
      }
      const int32_t path = desc_.last_path(desc_.ctx);
      const auto n = static_cast<int64_t>(info_.paths.size());
      if (path < -1 || path >= n) {
        throw PluginContractError(fmt::format(
            "{} returned {} from last_path, which is outside -1 .. {} (the index into its {} "
            "paths of the path the latest forward took, -1 = not said)",
            who_, path, n - 1, n));
      }
      return path;
    } else {
      return -1;
    }
  }

  // SPEC 5.1: the harness never hands an implementation a serving part it
  // did not declare, and a version 1 plugin none at all (its problem has no
  // field for it).
  void check_declared(const Problem& p) const {
    const std::string part = undeclared_serving_part(info_, p);
    if (part.empty()) return;
    if (Version == 1) {
      throw InputError(fmt::format(
          "{} speaks ABI version 1, whose problem has no field for {}; it is not asked", who_,
          part));
    }
    throw InputError(fmt::format("{} does not declare {}, which the problem needs", who_, part));
  }

  typename Abi<Version>::Descriptor desc_;
  std::shared_ptr<void> keep_alive_;
  ImplInfo info_;
  std::string who_;
  // SPEC 5.1: one implementation is never entered from two threads at once.
  mutable std::mutex mutex_;
  mutable std::deque<Retired> retired_;
};

}  // namespace

std::shared_ptr<const Implementation> make_plugin_impl(const attncheck_impl& d,
                                                       const std::string& origin,
                                                       std::shared_ptr<void> keep_alive) {
  return std::make_shared<PluginImpl<2>>(d, origin, std::move(keep_alive));
}

std::shared_ptr<const Implementation> make_plugin_impl(const attncheck_v1_impl& d,
                                                       const std::string& origin,
                                                       std::shared_ptr<void> keep_alive) {
  return std::make_shared<PluginImpl<1>>(d, origin, std::move(keep_alive));
}

}  // namespace attncheck
