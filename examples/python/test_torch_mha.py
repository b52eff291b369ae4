"""torch.nn.functional.multi_head_attention_forward with identity
projections and zero biases, so it computes attention itself (as the
LibTorch adapter torch_mha_f32 does): heads split from the embedding,
key padding as key_padding_mask, every other constraint as a float
attn_mask per (batch, head) (0 allowed, -inf not: a bool attn_mask would
be added as 0/1), weights per head. torch scales by 1/sqrt(dk) itself, so
no other scale is declared; dv must equal dk."""

import torch
import torch.nn.functional as F

import attncheck

torch.set_num_threads(1)


@attncheck.implementation(
    name="torch_mha_forward_f32", dtypes=["f32"],
    features=["key_valid", "causal", "window", "mask", "weights", "align_top_left",
              "align_bottom_right"],
    empty_rows="zero", precision={"accum": "f32"}, limits={"dv_equals_dk": True})
def mha(p):
    b, h, tq, tk, d = p.batch, p.heads, p.tq, p.tk, p.dk
    e = h * d
    # [b][h][t][d] -> [t][b][h * d], the layout MHA takes
    def embed(x, t):
        return torch.from_numpy(x.copy()).permute(2, 0, 1, 3).reshape(t, b, e)
    q, k, v = embed(p.q, tq), embed(p.k, tk), embed(p.v, tk)
    eye = torch.eye(e)
    attn_mask = torch.zeros(b * h, tq, tk)
    allowed = torch.from_numpy(p.allowed()).reshape(b * h, tq, tk)
    if p.key_valid is not None:  # key padding goes in its own argument
        padded = ~torch.from_numpy(p.key_valid.copy())
        allowed |= padded[:, None, None, :].expand(b, h, tq, tk).reshape(b * h, tq, tk)
    attn_mask.masked_fill_(~allowed, float("-inf"))
    out, weights = F.multi_head_attention_forward(
        q, k, v, e, h, in_proj_weight=torch.cat([eye, eye, eye]), in_proj_bias=torch.zeros(3 * e),
        bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
        out_proj_weight=eye, out_proj_bias=torch.zeros(e), training=False,
        key_padding_mask=None if p.key_valid is None else padded,
        need_weights=True, attn_mask=attn_mask, average_attn_weights=False)
    return out.reshape(tq, b, h, d).permute(1, 2, 0, 3), weights
