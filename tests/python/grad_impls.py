"""Python implementations with a backward pass for the bridge's tests
(tests/python/test_bridge.py): a correct NumPy one and one whose dQ forgets
the scale. A file of its own, so impls.py's list of names stays as the
command-line tests read it."""

import numpy as np

import attncheck

FEATURES = ["key_valid", "causal", "mask", "scale", "align_top_left", "align_bottom_right"]


def weights(p):
    """softmax(q k^T * scale + mask) in f64, zero on empty rows."""
    s = p.q @ np.swapaxes(p.k, -1, -2) * p.scale
    allowed = p.allowed()
    s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def gradients(p, dq_scale):
    """dQ, dK, dV of out = A v for dout: dV = A^T dO, dS = A (dO v^T - rowsum),
    dQ = dS k * scale, dK = dS^T q * scale."""
    a = weights(p)
    dv = np.swapaxes(a, -1, -2) @ p.dout
    da = p.dout @ np.swapaxes(p.v, -1, -2)
    ds = a * (da - np.sum(da * a, axis=-1, keepdims=True))
    return ds @ p.k * dq_scale, np.swapaxes(ds, -1, -2) @ p.q * p.scale, dv


@attncheck.implementation(name="np_grad_f64", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"},
                          backward=lambda p: gradients(p, p.scale))
def np_grad_f64(p):
    return weights(p) @ p.v


@attncheck.implementation(name="np_grad_forgets_scale", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"},
                          backward=lambda p: gradients(p, 1.0))
def np_grad_forgets_scale(p):
    """dQ without the scale (dK has it)."""
    return weights(p) @ p.v
