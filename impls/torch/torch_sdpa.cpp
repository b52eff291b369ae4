// torch_sdpa_f64 and torch_sdpa_f32: LibTorch 1.13's
// at::_scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
// need_attn_weights, is_causal) on the CPU, in double and in float.
//
// What the call takes, and so what the adapters declare:
// - attn_mask: a bool tensor broadcasting over [B][H][tq][tk] with true =
//   the key takes part (torch fills -inf where it is false; checked in
//   tests/test_torch.cpp), or a float tensor added to the scores. Key
//   padding and the explicit mask go in as the bool mask, AND-ed: the call
//   has no key-padding argument.
// - is_causal: a lower-triangular mask j <= i, top-left aligned; the call
//   refuses it together with any attn_mask ("Explicit attn_mask should not
//   be set when is_causal=True"), so causal with key padding or a mask is
//   answered UNSUPPORTED.
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
  if (p.causal && (attn_mask.has_value() || (p.align != Align::top_left && p.tq != p.tk))) {
    return ForwardResult::unsupported();
  }

  const at::Tensor q = to_torch(p.q, {p.batch, p.heads, p.tq, p.dk}, type);
  const at::Tensor k = to_torch(p.k, {p.batch, p.kv_heads, p.tk, p.dk}, type);
  const at::Tensor v = to_torch(p.v, {p.batch, p.kv_heads, p.tk, p.dv}, type);
  const auto [out, weights] = at::_scaled_dot_product_attention(
      q, k, v, attn_mask, /*dropout_p=*/0.0, /*need_attn_weights=*/true, p.causal);

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

ATTNCHECK_REGISTER_IMPL(make_sdpa(
    "torch_sdpa_f64", DType::f64,
    "LibTorch 1.13 at::_scaled_dot_product_attention in double on the CPU (bool mask, "
    "top-left causal, weights)"));
ATTNCHECK_REGISTER_IMPL(make_sdpa(
    "torch_sdpa_f32", DType::f32,
    "LibTorch 1.13 at::_scaled_dot_product_attention in float on the CPU (bool mask, "
    "top-left causal, weights)"));

}  // namespace
}  // namespace attncheck::impls::torch_adapters
