// torch_sdpa_f64, torch_sdpa_f32, torch_sdpa_bf16 (and torch_sdpa_f16):
// LibTorch 1.13's at::_scaled_dot_product_attention(query, key, value,
// attn_mask, dropout_p, need_attn_weights, is_causal) on the CPU, in double,
// float, bfloat16 and half.
//
// On the CPU the call is the composite "math" path: q * (1 / sqrt(dk)) in
// the tensors' dtype, matmul(q, k^T), the bool mask turned into an additive
// one of the same dtype (0 / -inf), softmax over the keys, matmul(P, v).
// In bf16 each of those tensors is stored in bf16 (what torch_common.h's
// adapter_info declares for it, and why). In Half, Debian's LibTorch 1.13.1
// raises "\"bmm\" not implemented for 'Half'" for the first matmul (and
// "softmax_lastdim_kernel_impl" has no Half kernel either): torch_sdpa_f16
// is registered only when a one-element call in Half succeeds at load, so
// with this torch it does not exist (docs/implementations.md, "LibTorch
// adapters"). Any call that torch refuses as not implemented for its
// dtype is answered UNSUPPORTED, never failed.
//
// What the call takes, and so what the adapters declare:
// - attn_mask: a bool tensor broadcasting over [B][H][tq][tk] with true =
//   the key takes part (torch fills -inf where it is false; checked in
//   tests/test_torch.cpp), or a float tensor added to the scores. Key
//   padding and the explicit mask go in as the bool mask, AND-ed: the call
//   has no key-padding argument.
// - is_causal: a lower-triangular mask j <= i, top-left aligned; the call
//   refuses it together with any attn_mask ("Explicit attn_mask should not
//   be set when is_causal=True"), so causal with key padding or a mask goes
//   in as one bool mask, the lower triangle AND-ed in, as a torch user
//   writes it (is_causal=False then); causal alone takes is_causal.
// - no scale argument: torch multiplies the query by 1 / sqrt(dk) itself,
//   so no FEATURE_SCALE (the harness then sends only the default scale).
// - weights: the CPU path returns them whether asked or not.
// - any strides: the tensors are handed over with the problem's strides.
// - no window, softcap, lse, backward, nor grouped K/V heads (matmul
//   broadcasting covers kv_heads = 1 only).
// - no bias, although a float attn_mask could carry one: is_causal refuses
//   it too, and with BIAS declared 7 in 16 generated cases (causal with
//   padding, a mask or a bias) would be unanswerable instead of 3 in 8,
//   which leaves properties such as ExtremeScoresStayFinite mostly
//   discarded ("unsupported") rather than checked.

#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include <ATen/ATen.h>

#include "../impl_common.h"
#include "attncheck/registry.h"
#include "torch_common.h"

namespace attncheck::impls::torch_adapters {
namespace {

constexpr Features kSdpaFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_CAUSAL |
    ATTNCHECK_FEATURE_ALIGN_TOP_LEFT | ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_WEIGHTS;

ForwardResult sdpa_forward(const Problem& p, DType d) {
  use_configured_threads();
  if (!within_fixed_semantics(p) || p.bias) return ForwardResult::unsupported();
  const at::ScalarType type = scalar_type(d);

  c10::optional<at::Tensor> attn_mask;
  if (const at::Tensor allowed = allowed_keys(p); allowed.defined()) attn_mask = allowed;
  if (p.causal && p.align != Align::top_left && p.tq != p.tk) return ForwardResult::unsupported();
  // is_causal takes no attn_mask: with one, causal joins it (j <= i).
  const bool is_causal = p.causal && !attn_mask.has_value();
  if (p.causal && attn_mask.has_value()) {
    attn_mask = at::logical_and(*attn_mask, at::ones({p.tq, p.tk}, at::kBool).tril());
  }

  const at::Tensor q = to_torch(p.q, {p.batch, p.heads, p.tq, p.dk}, type);
  const at::Tensor k = to_torch(p.k, {p.batch, p.kv_heads, p.tk, p.dk}, type);
  const at::Tensor v = to_torch(p.v, {p.batch, p.kv_heads, p.tk, p.dv}, type);
  at::Tensor out, weights;
  try {
    std::tie(out, weights) = at::_scaled_dot_product_attention(
        q, k, v, attn_mask, /*dropout_p=*/0.0, /*need_attn_weights=*/true, is_causal);
  } catch (const c10::Error& e) {
    if (!not_implemented_message(e).empty()) return ForwardResult::unsupported();
    throw;
  }

  ForwardResult r;
  r.out = to_doubles(out);
  r.weights = to_doubles(weights);
  return r;
}

std::shared_ptr<const Implementation> make_sdpa(const char* name, DType d,
                                                const char* description) {
  use_configured_threads();
  return std::make_shared<FunctionImpl>(
      adapter_info(name, d, kSdpaFeatures, Limits{}, description),
      [d](const Problem& p) { return sdpa_forward(p, d); });
}

// Torch's refusal of a one-element call in `d` as not implemented for that
// dtype, or nullopt when it computes it.
std::optional<std::string> sdpa_not_implemented(DType d) {
  use_configured_threads();
  const at::Tensor x = at::ones({1, 1, 1, 1}, scalar_type(d));
  try {
    at::_scaled_dot_product_attention(x, x, x, {}, 0.0, true, false);
  } catch (const c10::Error& e) {
    if (std::string message = not_implemented_message(e); !message.empty()) return message;
    throw;
  }
  return std::nullopt;
}

// torch_sdpa_f16 exists only where torch computes the call in Half (see
// the top); a static registrar, since ATTNCHECK_REGISTER_IMPL registers
// unconditionally. Its declaration is torch_sdpa_bf16's with Half, a guess
// no torch here could check: test_torch fails the day the probe succeeds,
// so that the adapter is checked before anyone relies on it. A probe that
// fails otherwise (any exception) registers nothing rather than ending the
// process that loads the module.
[[maybe_unused]] const bool kSdpaF16Registered = [] {
  try {
    if (sdpa_not_implemented(DType::f16)) return false;
  } catch (...) {
    return false;
  }
  register_impl(make_sdpa(
      "torch_sdpa_f16", DType::f16,
      "LibTorch at::_scaled_dot_product_attention in half on the CPU, where torch has Half "
      "CPU kernels (declared as torch_sdpa_bf16 in half; unverified)"));
  return true;
}();

ATTNCHECK_REGISTER_IMPL(make_sdpa(
    "torch_sdpa_f64", DType::f64,
    "LibTorch 1.13 at::_scaled_dot_product_attention in double on the CPU (bool mask, "
    "top-left causal, weights)"));
ATTNCHECK_REGISTER_IMPL(make_sdpa(
    "torch_sdpa_f32", DType::f32,
    "LibTorch 1.13 at::_scaled_dot_product_attention in float on the CPU (bool mask, "
    "top-left causal, weights)"));
ATTNCHECK_REGISTER_IMPL(make_sdpa(
    "torch_sdpa_bf16", DType::bf16,
    "LibTorch 1.13 at::_scaled_dot_product_attention in bfloat16 on the CPU (bool mask, "
    "top-left causal, weights; matmuls accumulate in bf16, softmax in float, P in bf16)"));

}  // namespace
}  // namespace attncheck::impls::torch_adapters
