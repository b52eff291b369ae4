"""attncheck.Problem: one attention problem (SPEC section 1) with NumPy arrays."""

import json

import numpy as np

from . import _core

# The NumPy type an implementation receives per format. NumPy has no
# bfloat16 and no fp8: bf16, e4m3 and e5m2 values come as float32 arrays,
# every element exactly a value of the format (torch.from_numpy(a).to(
# torch.bfloat16) is exact). A block format's logical values (an f16 scale
# times an integer of at most 8 bits: 19 significant bits, below 2^24) are
# float32 exactly too; its bytes come beside them (Problem.k_blocks).
NUMPY_DTYPES = {"f64": np.float64, "f32": np.float32, "bf16": np.float32, "f16": np.float16,
                "e4m3": np.float32, "e5m2": np.float32, "q8_0": np.float32, "q4_0": np.float32}

# The block formats (SPEC 1.2): K/V only, 32 values to a block along the
# head dimension (their bytes per block are the engine's: block_bytes).
BLOCK_FORMATS = ("q8_0", "q4_0")


def _readonly(a):
    a.setflags(write=False)
    return a


class Problem:
    """One scaled dot-product attention problem.

    Fields (SPEC section 1): dtype ("f64", "f32", "bf16", "f16": the
    format of out, bias, dout); q_dtype and kv_dtype, the formats of q and
    of k / v (dtype's unless the implementation declares combinations:
    also "e4m3", "e5m2", and for k / v the block formats "q8_0", "q4_0");
    batch, heads, kv_heads, tq, tk, dk, dv; q [batch][heads][tq][dk], k
    [batch][kv_heads][tk][dk], v [batch][kv_heads][tk][dv], each in its
    format's NumPy type (NUMPY_DTYPES; strided views when the
    implementation declares "strides"), k and v always the logical values;
    k_blocks, v_blocks: with a block kv_dtype, the bytes ggml stores, uint8
    [batch][kv_heads][tk][d / 32][34 (q8_0) or 18 (q4_0)] (SPEC 1.2: an f16
    scale, little-endian, then q8_0's 32 int8, or q4_0's 16 bytes whose
    low nibbles are elements 0-15 and high nibbles 16-31, each stored as
    the integer + 8), else None;
    key_valid bool [batch][tk] or None; mask bool [batch|1][heads|1][tq][tk]
    or None (True = allowed); bias [batch|1][heads|1][tq][tk] or None
    (added after the softcap); causal; align "top_left" or "bottom_right";
    window_left, window_right (-1 = unbounded); scale (multiplies q.k);
    softcap (0 = off); dout or None. Arrays handed to an implementation are
    read-only.
    """

    def __init__(self, q, k, v, *, dtype=None, q_dtype=None, kv_dtype=None, key_valid=None,
                 mask=None, bias=None, causal=False, align="top_left", window_left=-1,
                 window_right=-1, scale=None, softcap=0.0, dout=None):
        q, k, v = (np.asarray(x) for x in (q, k, v))
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim != 4:
                raise ValueError(f"Problem: {name} must be 4-d [batch][heads][t][d], not {x.shape}")
        self.dtype = dtype or {np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}.get(
            q.dtype, "f32")
        self.batch, self.heads, self.tq, self.dk = (int(n) for n in q.shape)
        _, self.kv_heads, self.tk, _ = (int(n) for n in k.shape)
        self.dv = int(v.shape[3])
        self.q, self.k, self.v = q, k, v
        self.key_valid = None if key_valid is None else np.asarray(key_valid, dtype=bool)
        self.mask = None if mask is None else np.asarray(mask, dtype=bool)
        self.bias = None if bias is None else np.asarray(bias)
        self.causal = bool(causal)
        self.align = align
        self.window_left = int(window_left)
        self.window_right = int(window_right)
        self.scale = float(1.0 / np.sqrt(self.dk) if scale is None else scale)
        self.softcap = float(softcap)
        self.dout = None if dout is None else np.asarray(dout)
        self.q_dtype = q_dtype or self.dtype
        self.kv_dtype = kv_dtype or self.dtype
        self.k_blocks = self.v_blocks = None
        if self.kv_dtype in BLOCK_FORMATS:
            # The bytes of the logical values, from the engine's encoding
            # (which refuses values no block holds, naming the block).
            d = _core.problem_round_trip(self._to_core())
            self.k_blocks, self.v_blocks = _readonly(d["k_blocks"]), _readonly(d["v_blocks"])

    @property
    def numpy_dtype(self):
        """The NumPy type of out (and of q, k, v when their formats are
        dtype's): float32 for bf16."""
        return NUMPY_DTYPES[self.dtype]

    @property
    def mixed(self):
        """Whether q or k / v has a format other than dtype."""
        return self.q_dtype != self.dtype or self.kv_dtype != self.dtype

    def position(self, i):
        """Key position of query i: i, or i + tk - tq bottom-right aligned."""
        return i if self.align == "top_left" else i + self.tk - self.tq

    def allowed(self):
        """bool [batch][heads][tq][tk]: whether query i of (b, h) may see
        key j, every constraint (key_valid, mask, causal, window) AND-ed. A
        row with no allowed key is an empty row."""
        i = np.arange(self.tq)[:, None]
        j = np.arange(self.tk)[None, :]
        pos = i if self.align == "top_left" else i + self.tk - self.tq
        ok = np.ones((self.tq, self.tk), dtype=bool)
        if self.causal:
            ok &= j <= pos
        if self.window_left >= 0:
            ok &= j >= pos - self.window_left
        if self.window_right >= 0:
            ok &= j <= pos + self.window_right
        out = np.broadcast_to(ok, (self.batch, self.heads, self.tq, self.tk)).copy()
        if self.key_valid is not None:
            out &= self.key_valid[:, None, None, :]
        if self.mask is not None:
            out &= self.mask
        return out

    def __repr__(self):
        extras = [f"causal {self.align}" if self.causal else "",
                  "key_valid" if self.key_valid is not None else "",
                  "mask" if self.mask is not None else "", "bias" if self.bias is not None else "",
                  f"window [{self.window_left}, {self.window_right}]"
                  if (self.window_left, self.window_right) != (-1, -1) else "",
                  f"softcap {self.softcap:g}" if self.softcap else ""]
        formats = (f"q={self.q_dtype},kv={self.kv_dtype},out={self.dtype}" if self.mixed
                   else self.dtype)
        return (f"<attncheck.Problem {formats} batch {self.batch} heads {self.heads} "
                f"kv_heads {self.kv_heads} tq {self.tq} tk {self.tk} dk {self.dk} dv {self.dv} "
                f"scale {self.scale:g}{''.join(' ' + e for e in extras if e)}>")

    # ---- between the engine and Python ----

    @classmethod
    def _from_core(cls, d, strided=True):
        """From the engine's dict (problem_convert.h), arrays read-only in
        the problem's dtype; q, k, v keep the generated layout."""
        p = cls.__new__(cls)
        npd = NUMPY_DTYPES[d["dtype"]]
        for key in ("dtype", "q_dtype", "kv_dtype", "batch", "heads", "kv_heads", "tq", "tk",
                    "dk", "dv", "causal", "align", "window_left", "window_right", "scale",
                    "softcap"):
            setattr(p, key, d[key])
        shapes = {"q": (p.batch, p.heads, p.tq, p.dk), "k": (p.batch, p.kv_heads, p.tk, p.dk),
                  "v": (p.batch, p.kv_heads, p.tk, p.dv)}
        formats = {"q": p.q_dtype, "k": p.kv_dtype, "v": p.kv_dtype}
        for name, shape in shapes.items():
            flat, strides = d[name]
            flat = flat.astype(NUMPY_DTYPES[formats[name]])
            x = np.lib.stride_tricks.as_strided(
                flat, shape, tuple(s * flat.itemsize for s in strides), writeable=False)
            setattr(p, name, x if strided else _readonly(np.ascontiguousarray(x)))
        p.key_valid = None if d["key_valid"] is None else _readonly(d["key_valid"].astype(bool))
        p.mask = None if d["mask"] is None else _readonly(d["mask"].astype(bool))
        p.bias = None if d["bias"] is None else _readonly(d["bias"].astype(npd))
        p.dout = None if d["dout"] is None else _readonly(d["dout"].astype(npd))
        p.k_blocks = None if d["k_blocks"] is None else _readonly(d["k_blocks"])
        p.v_blocks = None if d["v_blocks"] is None else _readonly(d["v_blocks"])
        return p

    def _to_core(self):
        def f64(x):
            return np.ascontiguousarray(np.asarray(x, dtype=np.float64))
        return {
            "dtype": self.dtype, "q_dtype": self.q_dtype, "kv_dtype": self.kv_dtype,
            "batch": self.batch, "heads": self.heads,
            "kv_heads": self.kv_heads, "tq": self.tq, "tk": self.tk, "dk": self.dk, "dv": self.dv,
            "q": f64(self.q), "k": f64(self.k), "v": f64(self.v),
            "key_valid": None if self.key_valid is None else np.asarray(self.key_valid, np.uint8),
            "mask": None if self.mask is None else np.asarray(self.mask, np.uint8),
            "bias": None if self.bias is None else f64(self.bias),
            "causal": self.causal, "align": self.align, "window_left": self.window_left,
            "window_right": self.window_right, "scale": self.scale, "softcap": self.softcap,
            "dout": None if self.dout is None else f64(self.dout),
        }

    # ---- files (SPEC 5.3) ----

    @classmethod
    def from_json(cls, text_or_dict, where="<json>"):
        """A problem from an attncheck-problem-1 (or a fixture's) JSON text
        or dict; validated by the engine (ValueError naming the field)."""
        text = text_or_dict if isinstance(text_or_dict, str) else json.dumps(text_or_dict)
        d, _, _ = _core.problem_from_json(text, where)
        return cls._from_core(d, strided=False)

    @classmethod
    def load(cls, path):
        """The problem of a problem or fixture file."""
        d, _, _ = _core.load_fixture(str(path))
        return cls._from_core(d, strided=False)

    def to_json(self):
        """The attncheck-problem-1 JSON text (values must be representable
        in the dtype: ValueError otherwise)."""
        return _core.problem_to_json(self._to_core())
