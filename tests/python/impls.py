"""Python implementations for the bridge's own tests: a correct NumPy one and
one broken in each way isolation must survive (tests/python/test_bridge.py)."""

import ctypes
import os

import numpy as np

import attncheck

FEATURES = ["key_valid", "causal", "mask", "scale", "align_top_left", "align_bottom_right"]


def attention(p, scale=None):
    """softmax(q k^T * scale + mask) v in the problem's dtype, zero on empty rows."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (p.q, p.k, p.v))
    s = np.einsum("bhid,bhjd->bhij", q, k) * (p.scale if scale is None else scale)
    allowed = p.allowed()
    s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(allowed, np.exp(s - m), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return (w @ v).astype(p.numpy_dtype)


@attncheck.implementation(name="np_ref_f64", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_ref_f64(p):
    return attention(p)


@attncheck.implementation(name="np_forgets_scale", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_forgets_scale(p):
    """Forgets the scale: multiplies q.k by 1."""
    return attention(p, scale=1.0)


@attncheck.implementation(name="np_crashes", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_crashes(p):
    """Dereferences a null pointer on three keys or more."""
    if p.tk >= 3:
        ctypes.string_at(0)
    return attention(p)


@attncheck.implementation(name="np_hangs", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_hangs(p):
    """Spins forever on two queries or more."""
    while p.tq >= 2:
        pass
    return attention(p)


@attncheck.implementation(name="np_raises", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_raises(p):
    """Raises ZeroDivisionError when dk >= 2."""
    if p.dk >= 2:
        return 1 / 0
    return attention(p)


@attncheck.implementation(name="np_wrong_shape", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_wrong_shape(p):
    """Returns out as [batch][tq][heads][dv] (heads and queries swapped)."""
    return attention(p).transpose(0, 2, 1, 3)


@attncheck.implementation(name="np_wrong_dtype", dtypes=["f32"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f32"})
def np_wrong_dtype(p):
    """Returns float64 for an f32 problem."""
    return attention(p).astype(np.float64)


@attncheck.implementation(name="np_forks", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64"})
def np_forks(p):
    """Forks; the copy returns into the worker."""
    os.fork()
    return attention(p)
