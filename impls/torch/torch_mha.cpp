// torch_mha_f32: LibTorch 1.13's torch::nn::functional::
// multi_head_attention_forward in float on the CPU, with identity
// projections (in_proj_weight = [I; I; I], out_proj_weight = I, zero
// biases), so it computes plain attention of the problem's heads. The
// identity GEMMs are exact: each output element is x * 1 plus zeros.
//
// What the call takes, and so what the adapter declares:
// - inputs [t][B][E] with E = heads * dk and head h in columns
//   h * dk .. h * dk + dk - 1; K and V share one shape, so dv = dk
//   (limits.dv_equals_dk) and no grouped K/V heads.
// - key_padding_mask [B][tk], bool, true = the key is ignored.
// - attn_mask: the C++ function (unlike Python's) adds it to every
//   (batch, head) score matrix after unsqueeze(0), so only a [tq][tk] float
//   mask works: a bool mask is silently added as 0 / 1 (true = +1 to the
//   score, not "masked"), and a per-head [B*H][tq][tk] mask fails to
//   broadcast. The explicit mask therefore goes in as a float [tq][tk] mask,
//   0 where allowed and -inf elsewhere, when it is the same for every batch
//   entry and head; other masks, and a bias, are UNSUPPORTED (a float mask
//   carrying the mask and a bias at once would need both to be [tq][tk]).
// - no causal flag (1.13's C++ function has none), no scale argument (the
//   query is multiplied by 1 / sqrt(head_dim)), no window, softcap, lse or
//   backward through this adapter.
// - weights: need_weights with average_attn_weights(false) returns them per
//   head.
// Inputs are rearranged into the [t][B][E] layout, so STRIDES is not
// declared: torch would only ever see the adapter's contiguous copy.
// - cost: the identity projections are real GEMMs, 2 (tq + 2 tk) E^2 + 2 tq
//   E^2 flops per batch entry, quadratic in E = heads * dk where the
//   attention itself is linear. A thorough real-size shape (32 heads of
//   dk 192, E = 6144, 3945 keys: 6e11 flops) took more than the default
//   10 s of CPU per call and was reported as a hang. The adapter declares
//   batch * heads <= 8 and dk <= 128 (E <= 1024, the width of the models
//   nn.MultiheadAttention serves): at 16384 keys 1.4e11 flops at most, a
//   few seconds, under the limit, and real-size shapes are fitted to it.

#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>

#include "../impl_common.h"
#include "attncheck/registry.h"
#include "torch_common.h"

namespace attncheck::impls::torch_adapters {
namespace {

namespace F = torch::nn::functional;

constexpr Features kMhaFeatures =
    ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK | ATTNCHECK_FEATURE_WEIGHTS;

// The problem's mask as MHA's [tq][tk] float mask, or undefined when its
// slices differ between batch entries or heads.
at::Tensor shared_float_mask(const Problem& p) {
  const Broadcast<uint8_t>& m = *p.mask;
  const size_t slice = static_cast<size_t>(p.tq * p.tk);
  for (size_t s = 1; s < static_cast<size_t>(m.batch * m.heads); ++s) {
    if (std::memcmp(m.data.data(), m.data.data() + s * slice, slice) != 0) return {};
  }
  const at::Tensor allowed =
      at::from_blob(const_cast<uint8_t*>(m.data.data()), {p.tq, p.tk}, at::kByte).to(at::kBool);
  return at::zeros({p.tq, p.tk}, at::kFloat).masked_fill(allowed.logical_not(), -INFINITY);
}

ForwardResult mha_forward(const Problem& p) {
  use_configured_threads();
  if (!within_fixed_semantics(p) || p.causal || p.bias || p.dv != p.dk) {
    return ForwardResult::unsupported();
  }
  at::Tensor attn_mask;
  if (p.mask) {
    attn_mask = shared_float_mask(p);
    if (!attn_mask.defined()) return ForwardResult::unsupported();
  }
  const int64_t e = p.heads * p.dk;
  const auto seq_first = [&](const Tensor& t, int64_t len) {
    return to_torch(t, {p.batch, p.heads, len, p.dk}, at::kFloat)
        .permute({2, 0, 1, 3})
        .reshape({len, p.batch, e});
  };
  const at::Tensor query = seq_first(p.q, p.tq);
  const at::Tensor key = seq_first(p.k, p.tk);
  const at::Tensor value = seq_first(p.v, p.tk);

  const at::Tensor eye = at::eye(e, at::kFloat);
  auto options = F::MultiheadAttentionForwardFuncOptions(
                     /*embed_dim_to_check=*/e, /*num_heads=*/p.heads,
                     /*in_proj_weight=*/at::cat({eye, eye, eye}),
                     /*in_proj_bias=*/at::zeros({3 * e}, at::kFloat), /*bias_k=*/{},
                     /*bias_v=*/{}, /*add_zero_attn=*/false, /*dropout_p=*/0.0,
                     /*out_proj_weight=*/eye, /*out_proj_bias=*/at::zeros({e}, at::kFloat))
                     .training(false)
                     .need_weights(true)
                     .average_attn_weights(false);
  if (!p.key_valid.empty()) {
    options.key_padding_mask(at::from_blob(const_cast<uint8_t*>(p.key_valid.data()),
                                           {p.batch, p.tk}, at::kByte)
                                 .to(at::kBool)
                                 .logical_not());
  }
  if (attn_mask.defined()) options.attn_mask(attn_mask);

  const auto [out, weights] = F::multi_head_attention_forward(query, key, value, options);
  ForwardResult r;
  // [tq][B][E] -> [B][H][tq][dv]
  r.out = to_doubles(out.view({p.tq, p.batch, p.heads, p.dk}).permute({1, 2, 0, 3}));
  r.weights = to_doubles(weights);  // [B][H][tq][tk]
  return r;
}

ATTNCHECK_REGISTER_IMPL([] {
  use_configured_threads();
  Limits limits;
  limits.dv_equals_dk = true;
  limits.max_batch_heads = 8;  // with dk_max: E <= 1024 (the cost note above)
  limits.dk_max = 128;
  return std::make_shared<FunctionImpl>(
      adapter_info("torch_mha_f32", DType::f32, kMhaFeatures, limits,
                   "LibTorch 1.13 torch::nn::functional::multi_head_attention_forward in float "
                   "with identity projections (key padding, shared mask, per-head weights)"),
      mha_forward);
}());

}  // namespace
}  // namespace attncheck::impls::torch_adapters
