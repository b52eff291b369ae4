#include "torch_common.h"

#include <ATen/Parallel.h>

#include <stdexcept>

#include "host/threads.h"
#include <utility>

namespace attncheck::impls::torch_adapters {

at::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::f64: return at::kDouble;
    case DType::f32: return at::kFloat;
    case DType::bf16: return at::kBFloat16;
    case DType::f16: return at::kHalf;
    default: throw std::invalid_argument("torch adapters: no dtype " + std::string(dtype_name(d)));
  }
}

std::string not_implemented_message(const c10::Error& e) {
  std::string message = e.what_without_backtrace();
  if (message.find("not implemented for '") == std::string::npos) return "";
  // The first line: torch appends where it was raised.
  if (const size_t eol = message.find('\n'); eol != std::string::npos) message.resize(eol);
  return message;
}

void use_configured_threads() {
  const int n = impl_threads();
  if (at::get_num_threads() != n) at::set_num_threads(n);
}

ImplInfo adapter_info(std::string name, DType d, Features features, Limits limits,
                      std::string description) {
  ImplInfo info;
  info.name = std::move(name);
  info.kind = Kind::adapter;
  info.dtypes = dtype_bit(d);
  info.features = features;
  // Torch neither reports an error nor zeroes a query without allowed keys;
  // it returns what softmax over all -inf gives. `zero` is the policy whose
  // check reports the NaN element by element (fixtures/expected-failures.json).
  info.empty_rows = EmptyRowPolicy::zero;
  info.precision.accum = d;
  info.precision.p_cast = d;
  info.precision.exp_ulps = 1;
  info.precision.flush_to_zero = false;
  info.precision.key_block = 0;
  // By stage (SPEC 4.1), in 16 bits: the matmuls' sums and S in d, the
  // softmax in float, P rounded to d, P.V summed in d (torch_common.h).
  if (unit_roundoff(d) > unit_roundoff(DType::f32)) {
    info.precision.score_accum = d;
    info.precision.s_cast = d;
    info.precision.softmax_accum = DType::f32;
    info.precision.pv_accum = d;
  }
  info.limits = limits;
  info.description = std::move(description);
  return info;
}

at::Tensor to_torch(const Tensor& t, std::array<int64_t, 4> shape, at::ScalarType type) {
  // from_blob only views the problem's buffer; the conversion copies it, so
  // torch never holds the problem's memory.
  const at::Tensor flat =
      at::from_blob(const_cast<double*>(t.data.data()), {static_cast<int64_t>(t.data.size())},
                    at::kDouble)
          .to(type, /*non_blocking=*/false, /*copy=*/true);
  return flat.as_strided(shape, t.strides);
}

namespace {

at::Tensor bytes_as_bool(const std::vector<uint8_t>& bytes, at::IntArrayRef shape) {
  return at::from_blob(const_cast<uint8_t*>(bytes.data()), shape, at::kByte).to(at::kBool);
}

}  // namespace

at::Tensor allowed_keys(const Problem& p) {
  at::Tensor allowed;
  if (!p.key_valid.empty()) allowed = bytes_as_bool(p.key_valid, {p.batch, 1, 1, p.tk});
  if (p.mask) {
    const at::Tensor mask =
        bytes_as_bool(p.mask->data, {p.mask->batch, p.mask->heads, p.tq, p.tk});
    allowed = allowed.defined() ? at::logical_and(allowed, mask) : mask;
  }
  return allowed;
}

std::vector<double> to_doubles(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  const double* begin = d.data_ptr<double>();
  return std::vector<double>(begin, begin + d.numel());
}

bool within_fixed_semantics(const Problem& p) {
  return p.window_left < 0 && p.window_right < 0 && p.softcap == 0.0 &&
         p.scale == Problem::default_scale(p.dk) && p.kv_heads == p.heads;
}

}  // namespace attncheck::impls::torch_adapters
