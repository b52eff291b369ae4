"""Declaring a Python callable as an implementation under test."""

import os
import re
import sys

from . import _core

DTYPES = ("f64", "f32", "bf16", "f16")
# P and S may also be stored in E4M3 before P.V and the softmax (as
# FlashAttention-3 stores P), as the C ABI accepts; E5M2 (u = 2^-3) is past
# the first-order analysis and refused there too.
CAST_DTYPES = DTYPES + ("e4m3",)

# ATTNCHECK_FEATURE_* of plugin.h by name, in lower case ("causal"), from the
# engine's own table. The bridge covers version 1 of the C ABI (plus s_cast):
# the serving features (sinks, packed and paged sequences, descales) are
# not offered; BACKWARD is declared by giving a backward callable.
_ALL_FEATURES = {name.lower(): bit for name, bit in _core.feature_bits().items()}
_UNOFFERED = ("backward", "sink", "packed", "paged_kv", "descale")
FEATURES = {name: bit for name, bit in _ALL_FEATURES.items() if name not in _UNOFFERED}

_NAME = re.compile(r"^[a-z0-9_.-]+$")
_LIMITS = ("max_tq", "max_tk", "max_batch_heads", "dk_min", "dk_max", "dk_multiple")

# Every implementation declared in this interpreter, by name.
_declared = {}


class Error(Exception):
    """Raise it to report an error, as a C plugin returns ATTNCHECK_ERROR:
    what an implementation declaring empty_rows="error" does for a query
    with no allowed key. Any other exception fails the case."""


class Unsupported(Exception):
    """Raise it for a problem the implementation does not take (as
    ATTNCHECK_UNSUPPORTED): the case is discarded and counted; a property
    with more discarded than judged cases is reported unsupported, never
    passed."""


class Implementation:
    """A Python callable declared with attncheck.implementation(...).

    Calling it calls the function. attncheck.check and the pytest plugin
    never call it in their own process: a worker interpreter imports the
    file that declared it and calls it there."""

    def __init__(self, fn, name, dtypes, features, precision, empty_rows, limits,
                 description, outputs, path, backward=None, combos=()):
        self.fn = fn
        self.backward = backward
        self.name = name
        # The output formats (one check per each), and every declared
        # combination of formats when some is mixed ([] otherwise).
        self.dtypes = dtypes
        self.combos = list(combos)
        self.features = features
        self.precision = precision
        self.empty_rows = empty_rows
        self.limits = limits
        self.description = description
        self.outputs = outputs
        self.path = path
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self):
        return f"<attncheck implementation {self.name!r} ({', '.join(self.dtypes)}) from {self.path}>"

    def _declaration(self):
        bits = 0
        for f in self.features:
            bits |= FEATURES[f]
        if self.backward is not None:
            bits |= _ALL_FEATURES["backward"]
        # As the C ABI's descriptor: with combos, dtypes holds the formats d
        # whose {d, d, d} is among them.
        uniform = [c for c in self.combos if "=" not in c]
        return {
            "name": self.name,
            "description": self.description,
            "dtypes": uniform if self.combos else list(self.dtypes),
            "combos": list(self.combos),
            "features": bits,
            "empty_rows": self.empty_rows,
            "precision": dict(self.precision),
            "limits": dict(self.limits),
        }


def _dtype_list(dtypes, what):
    """(output formats, combos): the output formats in DTYPES order, and
    the canonical names of every declared combination of formats when some
    entry is one (SPEC 5.2's spelling, "q=f32,kv=q8_0,out=f32"; a dtype d
    beside them is the combination q = kv = out = d), else []."""
    if isinstance(dtypes, str):
        dtypes = [dtypes]
    dtypes = list(dtypes)
    if not dtypes:
        raise ValueError(f"{what}: no dtype (expected some of {', '.join(DTYPES)}, or "
                         f"combinations q=F,kv=F,out=F)")
    parts = []
    for d in dtypes:
        if not isinstance(d, str):
            raise ValueError(f"{what}: {d!r} is not a dtype name")
        try:
            q, kv, out, canonical = _core.parse_combo(d)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        if canonical in (c for _, _, _, c in parts):
            raise ValueError(f"{what}: {d!r} is declared twice")
        parts.append((q, kv, out, canonical))
    outputs = [d for d in DTYPES if any(out == d for _, _, out, _ in parts)]
    mixed = any(not (q == kv == out) for q, kv, out, _ in parts)
    return outputs, ([c for _, _, _, c in parts] if mixed else [])


# Precision by stage (SPEC 4.1): Q may be rounded to any format, to q8_0
# (blocks of 32, as ggml quantizes Q for block-quantized K; never q4_0), or
# to the call's K/V format ("kv"); the accumulations are output formats (an
# fp8 or block accumulation is refused, as the C ABI refuses it). A stage
# not given is None: accum (q_cast: Q not rounded), the version 1 reading.
Q_CAST_FORMATS = DTYPES + ("e4m3", "e5m2", "q8_0", "kv")
_STAGES = ("q_cast", "score_accum", "softmax_accum", "pv_accum")
_PRECISION_KEYS = ("accum", "p_cast", "s_cast", "exp_ulps", "flush_to_zero", "key_block") + _STAGES


def _one_precision(precision, dtypes, what):
    """One precision (the declaration's or a path's) with its defaults,
    validated; `what` names it in errors ("precision", "precision.paths[0]")."""
    for key in precision:
        if key not in _PRECISION_KEYS:
            expected = _PRECISION_KEYS + (("paths",) if what == "precision" else ())
            raise ValueError(f"{what}: unknown field {key!r} (expected {', '.join(expected)})")
    accum = precision.get("accum", "f64" if dtypes == ["f64"] else "f32")
    out = {
        "accum": accum,
        "p_cast": precision.get("p_cast", accum),
        "s_cast": precision.get("s_cast"),
        "exp_ulps": precision.get("exp_ulps", 4),
        "flush_to_zero": bool(precision.get("flush_to_zero", False)),
        "key_block": precision.get("key_block", 0),
    }
    for key in _STAGES:
        out[key] = precision.get(key)
    allowed = {"accum": DTYPES, "p_cast": CAST_DTYPES, "s_cast": CAST_DTYPES,
               "q_cast": Q_CAST_FORMATS, "score_accum": DTYPES, "softmax_accum": DTYPES,
               "pv_accum": DTYPES}
    for key, formats in allowed.items():
        if out[key] is not None and out[key] not in formats:
            accumulation = ""
            if formats is DTYPES:
                accumulation = " (an accumulation is f64, f32, bf16 or f16)"
            raise ValueError(f"{what}.{key}: unknown format {out[key]!r} "
                             f"(expected one of {', '.join(formats)}){accumulation}")
    for key in ("exp_ulps", "key_block"):
        if not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 0:
            raise ValueError(f"{what}.{key}: {out[key]!r} is not a non-negative integer")
    return out


def _precision(precision, dtypes):
    """The declared traits with their defaults: accum f64 for an
    implementation of f64 alone, else f32; p_cast = accum; s_cast None
    (= accum); exp_ulps 4 (NumPy's and torch's vectorised exp are within a
    few ulps, not correctly rounded: declare what yours guarantees); no
    flush to zero; key_block 0 (one pass); the stages q_cast,
    score_accum, softmax_accum, pv_accum None (accum; q_cast: Q not
    rounded). "paths": the dispatch paths, each {"name", and the keys
    above}, a key a path does not give taken from the declaration's own
    (before its defaults); the declaration's precision must be at least as
    loose as every path's."""
    precision = dict(precision or {})
    paths = precision.pop("paths", None) or []
    out = _one_precision(precision, dtypes, "precision")
    if not isinstance(paths, (list, tuple)):
        raise ValueError(f"precision.paths: expected a list of dicts, not {type(paths).__name__}")
    out["paths"] = []
    for n, path in enumerate(paths):
        what = f"precision.paths[{n}]"
        if not isinstance(path, dict):
            raise ValueError(f"{what}: expected a dict with a name, not {type(path).__name__}")
        path = dict(path)
        name = path.pop("name", None)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{what}: the name {name!r} must be a string matching [a-z0-9_.-]+")
        if any(p["name"] == name for p in out["paths"]):
            raise ValueError(f"{what}: the path name {name!r} repeats")
        what = f"precision.paths[{name}]"
        one = _one_precision({**precision, **path}, dtypes, what)
        # The C++ comparison the C ABI's loader makes (core/precision.cpp).
        tighter = _core.tighter_component(out, one)
        if tighter:
            raise ValueError(f"{what}: the declaration's own precision is tighter than this "
                             f"path's ({tighter}); it must be at least as loose as every path's")
        out["paths"].append({"name": name, **one})
    return out


def implementation(name, dtypes, features=(), precision=None, empty_rows="error", limits=None,
                   description="", outputs=None, backward=None):
    """Declares the decorated callable as an attention implementation.

    The callable receives an attncheck.Problem (its q, k, v are read-only
    NumPy arrays in the problem's dtype; bf16 values come as float32 arrays
    holding bf16 values) and returns `out` [batch][heads][tq][dv], or a
    tuple / dict with out and the declared extra outputs ("weights"
    [b][h][tq][tk], "lse" [b][h][tq]), as NumPy arrays, torch tensors, or
    anything NumPy can convert (the array interface, DLPack). `out` must be
    in the problem's dtype: float64, float32, float16, and for bf16 a
    torch.bfloat16 tensor or float32 values representable in bf16.

    name: unique, [a-z0-9_.-]+.  dtypes: some of "f64", "f32", "bf16",
    "f16", and combinations of formats spelled as `check --dtype` spells
    them ("q=f32,kv=q8_0,out=f32": q and kv also e4m3 or e5m2, kv also the
    block formats q8_0 and q4_0); with a combination in the list, the list
    is every combination declared (a plain "f32" is q = kv = out = f32),
    and each problem's formats are p.q_dtype and p.kv_dtype.  features:
    names of plugin.h's ATTNCHECK_FEATURE_* bits in lower case
    ("key_valid", "causal", "window", "mask", "bias", "gqa", "strides",
    "weights", "lse", "softcap", "align_top_left", "align_bottom_right",
    "scale", "nondeterministic"); only problems inside them are generated.
    precision: {"accum", "p_cast", "s_cast", "exp_ulps", "flush_to_zero",
    "key_block", and by stage "q_cast" (a format or "kv"), "score_accum",
    "softmax_accum", "pv_accum", and "paths": [{"name", and the same keys}]},
    from which the tolerances derive; a forward that took a path says so
    by returning a dict with "path": NAME.  empty_rows: "error"
    (raise attncheck.Error for a query with no allowed key) or "zero".
    limits: {"max_tq", "max_tk", "max_batch_heads", "dk_min", "dk_max",
    "dk_multiple", "dv_equals_dk"}.  outputs: the order of a returned tuple
    (default: out, then weights and lse where declared).  backward: a
    callable of the same problem, whose p.dout [batch][heads][tq][dv] is
    set, returning the gradients (dq [batch][heads][tq][dk], dk
    [batch][kv_heads][tk][dk], dv [batch][kv_heads][tk][dv]) as a tuple in
    that order or a dict, in the problem's dtype as `out`; giving it
    declares the "backward" feature (GradientsMatchOracle).

    Decorators stack: one function may be declared several times (one per
    dtype with its own precision, say). Declare implementations at the top
    level of a module: a worker finds them by importing the file.
    """
    what = f"attncheck.implementation(name={name!r})"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what}: the name must match [a-z0-9_.-]+")
    dtypes, combos = _dtype_list(dtypes, what + " dtypes")
    if isinstance(features, str):
        features = [features]
    features = [f.lower() for f in features]
    for f in features:
        if f == "backward":
            raise ValueError(f"{what}: declare a backward pass with backward=CALLABLE, not as a "
                             f"feature")
        if f not in FEATURES:
            offered = ", ".join(FEATURES)
            raise ValueError(f"{what}: unknown feature {f!r} (expected some of {offered})")
    if empty_rows not in ("error", "zero"):
        raise ValueError(f"{what}: empty_rows must be 'error' or 'zero', not {empty_rows!r}")
    lim = {key: 0 for key in _LIMITS}
    lim["dv_equals_dk"] = False
    for key, value in dict(limits or {}).items():
        if key not in lim:
            raise ValueError(f"{what}: unknown limit {key!r} (expected {', '.join(lim)})")
        lim[key] = bool(value) if key == "dv_equals_dk" else int(value)
        if key != "dv_equals_dk" and lim[key] < 0:
            raise ValueError(f"{what}: limit {key} is negative")
    prec = _precision(precision, dtypes)
    extra = [o for o in ("weights", "lse") if o in features]
    if outputs is None:
        outputs = ["out"] + extra
    outputs = list(outputs)
    if sorted(outputs) != sorted(["out"] + extra):
        raise ValueError(f"{what}: outputs {outputs} must name out and the declared extra "
                         f"outputs {extra} once each")

    if backward is not None and not callable(backward):
        raise TypeError(f"{what}: backward must be a callable, not {type(backward).__name__}")

    def declare(fn):
        target = fn.fn if isinstance(fn, Implementation) else fn
        if not callable(target):
            raise TypeError(f"{what}: decorates a callable, not {type(target).__name__}")
        # The file that declares it (not the one defining the function: a
        # library's function may be declared by a test file).
        source = sys._getframe(1).f_code.co_filename
        impl = Implementation(target, name, dtypes, features, prec, empty_rows, lim,
                              description or (target.__doc__ or "").strip().split("\n")[0],
                              outputs, os.path.abspath(source), backward, combos)
        previous = _declared.get(name)
        if previous is not None and previous.path != impl.path:
            raise ValueError(f"{what}: already declared in {previous.path}")
        _declared[name] = impl
        return impl

    return declare


def declared():
    """Every implementation declared in this interpreter so far."""
    return list(_declared.values())
