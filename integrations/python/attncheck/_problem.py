"""attncheck.Problem: one attention problem (SPEC section 1) with NumPy arrays."""

import json

import numpy as np

from . import _core

# The NumPy type an implementation receives per dtype. NumPy has no
# bfloat16: bf16 values come as float32 arrays, every element exactly a
# bf16 value (torch.from_numpy(a).to(torch.bfloat16) is exact).
NUMPY_DTYPES = {"f64": np.float64, "f32": np.float32, "bf16": np.float32, "f16": np.float16}


def _readonly(a):
    a.setflags(write=False)
    return a


class Problem:
    """One scaled dot-product attention problem.

    Fields (SPEC section 1): dtype ("f64", "f32", "bf16", "f16"); batch,
    heads, kv_heads, tq, tk, dk, dv; q [batch][heads][tq][dk], k
    [batch][kv_heads][tk][dk], v [batch][kv_heads][tk][dv] in
    numpy_dtype (strided views when the implementation declares "strides");
    key_valid bool [batch][tk] or None; mask bool [batch|1][heads|1][tq][tk]
    or None (True = allowed); bias [batch|1][heads|1][tq][tk] or None
    (added after the softcap); causal; align "top_left" or "bottom_right";
    window_left, window_right (-1 = unbounded); scale (multiplies q.k);
    softcap (0 = off); dout or None. Arrays handed to an implementation are
    read-only.
    """

    def __init__(self, q, k, v, *, dtype=None, key_valid=None, mask=None, bias=None,
                 causal=False, align="top_left", window_left=-1, window_right=-1,
                 scale=None, softcap=0.0, dout=None):
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

    @property
    def numpy_dtype(self):
        """The NumPy type of q, k, v and out (float32 for bf16)."""
        return NUMPY_DTYPES[self.dtype]

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
        return (f"<attncheck.Problem {self.dtype} batch {self.batch} heads {self.heads} "
                f"kv_heads {self.kv_heads} tq {self.tq} tk {self.tk} dk {self.dk} dv {self.dv} "
                f"scale {self.scale:g}{''.join(' ' + e for e in extras if e)}>")

    # ---- between the engine and Python ----

    @classmethod
    def _from_core(cls, d, strided=True):
        """From the engine's dict (problem_convert.h), arrays read-only in
        the problem's dtype; q, k, v keep the generated layout."""
        p = cls.__new__(cls)
        npd = NUMPY_DTYPES[d["dtype"]]
        for key in ("dtype", "batch", "heads", "kv_heads", "tq", "tk", "dk", "dv", "causal",
                    "align", "window_left", "window_right", "scale", "softcap"):
            setattr(p, key, d[key])
        shapes = {"q": (p.batch, p.heads, p.tq, p.dk), "k": (p.batch, p.kv_heads, p.tk, p.dk),
                  "v": (p.batch, p.kv_heads, p.tk, p.dv)}
        for name, shape in shapes.items():
            flat, strides = d[name]
            flat = flat.astype(npd)
            x = np.lib.stride_tricks.as_strided(
                flat, shape, tuple(s * flat.itemsize for s in strides), writeable=False)
            setattr(p, name, x if strided else _readonly(np.ascontiguousarray(x)))
        p.key_valid = None if d["key_valid"] is None else _readonly(d["key_valid"].astype(bool))
        p.mask = None if d["mask"] is None else _readonly(d["mask"].astype(bool))
        p.bias = None if d["bias"] is None else _readonly(d["bias"].astype(npd))
        p.dout = None if d["dout"] is None else _readonly(d["dout"].astype(npd))
        return p

    def _to_core(self):
        def f64(x):
            return np.ascontiguousarray(np.asarray(x, dtype=np.float64))
        return {
            "dtype": self.dtype, "batch": self.batch, "heads": self.heads,
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
