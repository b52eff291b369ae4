"""The worker side: importing a user's file and calling its implementations.

Runs only in a worker interpreter (python -m attncheck._worker), which the
harness starts for every implementation it checks; the harness's own
process never calls user code."""

import importlib.util
import os
import sys
import traceback

import numpy as np

from . import _declare
from ._problem import Problem

# True in a worker interpreter (set by attncheck._worker).
in_worker = False


class ContractError(Exception):
    """What the implementation returned breaks the contract (a shape, a
    dtype, a value its format cannot hold): the case fails with this
    message, as a C plugin's contract errors do."""


def _where(tb, path=None):
    """'file:line in function' of the innermost frame of the user's code."""
    frames = [f for f in traceback.extract_tb(tb)
              if not f.filename.startswith(os.path.dirname(__file__) + os.sep)]
    if path is not None:
        frames = [f for f in frames if os.path.abspath(f.filename) == path] or frames
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno} in {f.name})"


def _one_line(e):
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def load_file(path):
    """Imports the file at `path` (its folder first on sys.path, as
    `python FILE` would) and returns the implementations it declares."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem not in sys.modules else f"_attncheck_user_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError("not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 (SystemExit while importing is a load error too)
        raise ImportError(f"importing it raised {_one_line(e)}{_where(e.__traceback__, path)}") from None
    impls = [i for i in _declare.declared() if i.path == path]
    if not impls:
        raise ImportError("declares no implementation (attncheck.implementation(...) at the "
                          "top level of the file)")
    return impls


def _to_numpy(x, what):
    """x as a NumPy array: torch tensors (bf16 widened exactly to float32),
    anything with the array interface or DLPack."""
    mod = type(x).__module__ or ""
    if mod.startswith("torch"):
        import torch
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.to(torch.float32).numpy(), "bfloat16"
        return x.numpy(), str(x.dtype).replace("torch.", "")
    if isinstance(x, np.ndarray):
        return x, str(x.dtype)
    if hasattr(x, "__array__") or hasattr(x, "__array_interface__"):
        a = np.asarray(x)
        return a, str(a.dtype)
    if hasattr(x, "__dlpack__"):
        a = np.from_dlpack(x)
        return a, str(a.dtype)
    raise ContractError(f"{what} is a {type(x).__name__}, not an array (NumPy, torch, or anything "
                        f"with the array interface or DLPack)")


# What comes back in the problem's own format (SPEC 1): out and the gradients.
_IN_OUTPUT_FORMAT = ("out", "dq", "dk", "dv")

_OUT_DTYPES = {"f64": ("float64",), "f32": ("float32",), "f16": ("float16",),
               "bf16": ("bfloat16", "float32")}


def _check(decl, p, what, x, shape):
    a, dtype = _to_numpy(x, what)
    if a.shape != shape:
        names = {"out": "[batch, heads, tq, dv]", "weights": "[batch, heads, tq, tk]",
                 "lse": "[batch, heads, tq]", "dq": "[batch, heads, tq, dk]",
                 "dk": "[batch, kv_heads, tk, dk]", "dv": "[batch, kv_heads, tk, dv]"}[what]
        raise ContractError(f"{what} has shape {tuple(a.shape)}, expected {shape} {names}")
    if what in _IN_OUTPUT_FORMAT:
        if dtype not in _OUT_DTYPES[p.dtype]:
            expected = " or ".join(_OUT_DTYPES[p.dtype])
            raise ContractError(f"{what} has dtype {dtype}, expected {expected} for a {p.dtype} "
                                f"problem")
        if p.dtype == "bf16" and dtype == "float32":
            bits = np.ascontiguousarray(a).view(np.uint32)
            bad = np.flatnonzero((bits & 0xFFFF) != 0)
            if bad.size:
                idx = np.unravel_index(bad[0], a.shape)
                raise ContractError(f"{what}{list(int(i) for i in idx)} = {a[idx]!r} is not a bf16 "
                                    f"value ({bad.size} such elements; round to bf16 or return "
                                    f"a torch.bfloat16 tensor)")
    elif a.dtype.kind != "f":
        raise ContractError(f"{what} has dtype {dtype}, expected a floating-point type")
    return np.ascontiguousarray(a, dtype=np.float64)


def _call(fn, p):
    """Calls the implementation's `fn` on `p`: ("ok", "", result), or its
    declared refusal ("unsupported" / "error", message, None); anything
    else it raises fails the case, in one line with where it was raised."""
    try:
        return "ok", "", fn(p)
    except Unsupported_ as e:
        return "unsupported", str(e), None
    except Error_ as e:
        return "error", str(e) or "attncheck.Error", None
    except Exception as e:  # noqa: BLE001 (any exception of the implementation fails the case)
        raise RuntimeError(f"{_one_line(e)}"
                           f"{_where(e.__traceback__)}") from None


def _path(decl, r):
    """The dispatch path a forward says it took (SPEC 4.1): a returned
    dict's "path", a name among the declared paths, or None (not said:
    judged by the declaration's own precision)."""
    name = r.get("path")
    if name is None:
        return None
    names = [p["name"] for p in decl.precision.get("paths", [])]
    if name not in names:
        declared = f"declared paths are {', '.join(names)}" if names else "it declares no paths"
        raise ContractError(f"returned path {name!r}, which is not a declared path ({declared})")
    return name


def forward(decl, d):
    """Calls `decl` on the engine's problem dict; returns (status, error,
    out, weights, lse, path) with float64 arrays (None where not returned)
    and the name of the path the call took (None: not said).
    Raises ContractError for what the contract forbids and a one-line
    exception for anything the implementation raised."""
    p = Problem._from_core(d, strided="strides" in decl.features)
    status, error, r = _call(decl.fn, p)
    if status != "ok":
        return status, error, None, None, None, None
    path = None
    if isinstance(r, dict):
        unknown = set(r) - set(decl.outputs) - {"path"}
        if unknown:
            raise ContractError(f"returned a dict with {sorted(unknown)}; declared outputs are "
                                f"{decl.outputs} (and \"path\", the path it took)")
        path = _path(decl, r)
        got = r
    elif isinstance(r, (tuple, list)):
        if len(r) != len(decl.outputs):
            raise ContractError(f"returned {len(r)} values, expected {len(decl.outputs)} "
                                f"({', '.join(decl.outputs)})")
        got = dict(zip(decl.outputs, r))
    else:
        if len(decl.outputs) != 1:
            raise ContractError(f"returned one value, expected {', '.join(decl.outputs)}")
        got = {"out": r}
    shapes = {"out": (p.batch, p.heads, p.tq, p.dv), "weights": (p.batch, p.heads, p.tq, p.tk),
              "lse": (p.batch, p.heads, p.tq)}
    result = {}
    for what in decl.outputs:
        if got.get(what) is None:
            raise ContractError(f"returned no {what}")
        result[what] = _check(decl, p, what, got[what], shapes[what])
    return "ok", "", result["out"], result.get("weights"), result.get("lse"), path


def backward(decl, d):
    """Calls decl.backward on the engine's problem dict (its dout set);
    returns (status, error, dq, dk, dv) as forward does."""
    p = Problem._from_core(d, strided="strides" in decl.features)
    status, error, r = _call(decl.backward, p)
    if status != "ok":
        return status, error, None, None, None
    names = ("dq", "dk", "dv")
    if isinstance(r, dict):
        if sorted(r) != sorted(names):
            raise ContractError(f"backward returned a dict with {sorted(r)}; expected dq, dk, dv")
        got = r
    elif isinstance(r, (tuple, list)) and len(r) == 3:
        got = dict(zip(names, r))
    else:
        raise ContractError("backward returned neither (dq, dk, dv) nor a dict of them")
    shapes = {"dq": (p.batch, p.heads, p.tq, p.dk), "dk": (p.batch, p.kv_heads, p.tk, p.dk),
              "dv": (p.batch, p.kv_heads, p.tk, p.dv)}
    out = [_check(decl, p, what, got[what], shapes[what]) for what in names]
    return ("ok", "", *out)


Unsupported_ = _declare.Unsupported
Error_ = _declare.Error
