"""Python implementations declaring combinations of formats
(tests/python/test_formats.py): K/V in ggml's q8_0 / q4_0 blocks read from
their bytes, K/V in fp8, and one block reader with a bug such kernels had."""

import numpy as np

import attncheck

FEATURES = ["key_valid", "causal", "mask", "scale", "align_top_left", "align_bottom_right"]
BLOCK_COMBOS = ["q=f32,kv=q8_0,out=f32", "q=f32,kv=q4_0,out=f32"]


def decode(blocks, fmt, high_nibbles_first=False):
    """The logical values of ggml blocks, uint8 [..., d / 32][bytes] ->
    float64 [..., d] (SPEC 1.2: an f16 scale, little-endian, then q8_0's
    32 int8 or q4_0's 16 bytes, elements 0-15 in the low nibbles)."""
    scale = blocks[..., 0:2].copy().view("<f2").astype(np.float64)  # [..., nb, 1]
    if fmt == "q8_0":
        ints = blocks[..., 2:].copy().view(np.int8).astype(np.float64)
    else:
        low = (blocks[..., 2:] & 0x0F).astype(np.float64) - 8
        high = (blocks[..., 2:] >> 4).astype(np.float64) - 8
        ints = np.concatenate([high, low] if high_nibbles_first else [low, high], axis=-1)
    values = scale * ints
    return values.reshape(values.shape[:-2] + (-1,))


def attention(p, k, v):
    """softmax(q k^T * scale) v over the allowed keys in float64, rounded to
    the output's format; empty rows are an error (attncheck.Error)."""
    q = np.asarray(p.q, dtype=np.float64)
    s = np.einsum("bhid,bhjd->bhij", q, np.repeat(k, p.heads // p.kv_heads, axis=1)) * p.scale
    allowed = p.allowed()
    if not allowed.any(axis=-1).all():
        raise attncheck.Error("a query with no allowed key")
    s = np.where(allowed, s, -np.inf)
    e = np.where(allowed, np.exp(s - s.max(axis=-1, keepdims=True)), 0.0)
    w = e / e.sum(axis=-1, keepdims=True)
    return (w @ np.repeat(v, p.heads // p.kv_heads, axis=1)).astype(p.numpy_dtype)


def from_blocks(p, high_nibbles_first=False):
    """K and V decoded from the bytes, checked against the logical values
    the problem also carries (the bridge hands both)."""
    k = decode(p.k_blocks, p.kv_dtype)
    v = decode(p.v_blocks, p.kv_dtype)
    if not (np.array_equal(k, p.k) and np.array_equal(v, p.v)):
        raise AssertionError("k_blocks / v_blocks do not decode to k / v")
    if high_nibbles_first:
        k = decode(p.k_blocks, p.kv_dtype, high_nibbles_first=True)
        v = decode(p.v_blocks, p.kv_dtype, high_nibbles_first=True)
    return k, v


@attncheck.implementation(name="np_blocks_f32", dtypes=BLOCK_COMBOS, features=FEATURES,
                          precision={"accum": "f64"})
def np_blocks_f32(p):
    """K/V read from ggml's q8_0 / q4_0 bytes, then attention in float64."""
    return attention(p, *from_blocks(p))


@attncheck.implementation(name="np_blocks_swapped_nibbles", dtypes=BLOCK_COMBOS,
                          features=FEATURES, precision={"accum": "f64"})
def np_blocks_swapped_nibbles(p):
    """Reads q4_0's high nibbles as elements 0-15 (the nibble order swapped)."""
    return attention(p, *from_blocks(p, high_nibbles_first=True))


@attncheck.implementation(name="np_fp8_kv", dtypes=["f32", "q=f32,kv=e4m3,out=f32",
                                                     "q=bf16,kv=e5m2,out=f32"],
                          features=FEATURES, precision={"accum": "f64"})
def np_fp8_kv(p):
    """Any of its formats, each arriving exactly in its NumPy type."""
    expected = {"q": attncheck.NUMPY_DTYPES[p.q_dtype], "k": attncheck.NUMPY_DTYPES[p.kv_dtype]}
    if p.q.dtype != expected["q"] or p.k.dtype != expected["k"] or p.k_blocks is not None:
        raise AssertionError(f"q {p.q.dtype}, k {p.k.dtype} for {p!r}")
    return attention(p, np.asarray(p.k, np.float64), np.asarray(p.v, np.float64))


def _zero_gradients(p):
    """Zeros: GradientsMatchOracle skips a q8_0 q_cast, so they are never judged."""
    return (np.zeros(p.q.shape, np.float32), np.zeros(p.k.shape, np.float32),
            np.zeros(p.v.shape, np.float32))


@attncheck.implementation(name="np_q8_q_backward", dtypes=["f32"], features=FEATURES,
                          precision={"accum": "f64", "q_cast": "q8_0"}, backward=_zero_gradients)
def np_q8_q_backward(p):
    """Declares Q quantized to q8_0 and a backward pass."""
    return attention(p, np.asarray(p.k, np.float64), np.asarray(p.v, np.float64))
