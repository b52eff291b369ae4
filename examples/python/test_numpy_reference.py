"""A NumPy reference attention, checked in f64 and f32: everything SPEC 1
defines for a dense problem (key padding, causal masks and windows in both
alignments, explicit masks, bias, softcap, grouped K/V heads, any scale,
strided inputs, weights and lse)."""

import numpy as np

import attncheck

FEATURES = ["key_valid", "causal", "window", "mask", "bias", "softcap", "gqa", "strides",
            "scale", "weights", "lse", "align_top_left", "align_bottom_right"]


def reference(p):
    """Softmax attention in the inputs' own format; empty rows give zeros
    and lse = -inf."""
    dt = p.numpy_dtype
    group = p.heads // p.kv_heads
    k = np.repeat(p.k, group, axis=1)
    v = np.repeat(p.v, group, axis=1)
    s = (p.q @ np.swapaxes(k, -1, -2)) * dt(p.scale)
    if p.softcap:
        c = dt(p.softcap)
        s = c * np.tanh(s / c)
    if p.bias is not None:
        s = s + p.bias
    allowed = p.allowed()
    s = np.where(allowed, s, dt(-np.inf))
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, dt(0))
    e = np.where(allowed, np.exp(s - m), dt(0))
    total = e.sum(axis=-1, keepdims=True)
    empty = total == 0
    w = e / np.where(empty, dt(1), total)
    out = (w @ v).astype(dt)
    lse = np.where(empty[..., 0], dt(-np.inf), (m + np.log(np.where(empty, dt(1), total)))[..., 0])
    return out, w, lse


numpy_reference_f64 = attncheck.implementation(
    name="numpy_reference_f64", dtypes=["f64"], features=FEATURES, empty_rows="zero",
    precision={"accum": "f64"})(reference)
numpy_reference_f32 = attncheck.implementation(
    name="numpy_reference_f32", dtypes=["f32"], features=FEATURES, empty_rows="zero",
    precision={"accum": "f32"})(reference)
