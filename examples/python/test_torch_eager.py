"""Attention as users write it in eager PyTorch, in f32, bf16 and f16:

    softmax(q @ k.transpose(-2, -1) * scale + mask) @ v

with an additive mask (0 where allowed, -inf elsewhere). Declared honestly:
in bf16 the scores q @ k^T are stored in bf16 (s_cast bf16) and so are the
weights softmax returns before the product with v (p_cast bf16), each
product accumulating in f32. torch 1.13 has no f16 matrix product on the
CPU, so f16 problems are answered UNSUPPORTED with torch's reason."""

import torch

import attncheck

torch.set_num_threads(1)  # a fixed summation order (Determinism)

FEATURES = ["key_valid", "causal", "window", "mask", "scale", "align_top_left",
            "align_bottom_right"]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def eager(p):
    dt = DTYPES[p.dtype]
    q, k, v = (torch.from_numpy(x.copy()).to(dt) for x in (p.q, p.k, p.v))
    mask = torch.zeros(p.batch, p.heads, p.tq, p.tk, dtype=dt)
    mask.masked_fill_(~torch.from_numpy(p.allowed()), float("-inf"))
    try:
        scores = q @ k.transpose(-2, -1) * p.scale + mask
        return torch.softmax(scores, dim=-1) @ v
    except RuntimeError as e:  # "... not implemented for 'Half'"
        raise attncheck.Unsupported(str(e)) from None


torch_eager_f32 = attncheck.implementation(
    name="torch_eager_f32", dtypes=["f32"], features=FEATURES, empty_rows="zero",
    precision={"accum": "f32"})(eager)
torch_eager_bf16 = attncheck.implementation(
    name="torch_eager_bf16", dtypes=["bf16"], features=FEATURES, empty_rows="zero",
    precision={"accum": "f32", "s_cast": "bf16", "p_cast": "bf16"})(eager)
torch_eager_f16 = attncheck.implementation(
    name="torch_eager_f16", dtypes=["f16"], features=FEATURES, empty_rows="zero",
    precision={"accum": "f32", "s_cast": "f16", "p_cast": "f16"})(eager)
