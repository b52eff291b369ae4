"""The Python bridge against the field description (core/fields.h): the
converters between a Problem and its dict, and a declaration's precision
(its stages and paths), carry every field the description marks as
crossing the bridge, so a field added there and forgotten in
problem_to_py, problem_from_py or info_from_py fails here."""

import numpy as np

from attncheck import _core, _declare


def every_field_set():
    """A valid problem (batch 2, heads 4 over 2 K/V heads, 3 queries, 4
    keys) in which every field the bridge carries differs from a default
    problem's."""
    b, h, g, tq, tk, dk, dv = 2, 4, 2, 3, 4, 2, 3
    rng = np.random.default_rng(1)

    def tensor(*shape):
        return rng.integers(-2, 3, shape).astype(np.float64)

    return {
        "dtype": "f32",
        "q_dtype": "f16",
        "kv_dtype": "e4m3",
        "batch": b, "heads": h, "kv_heads": g, "tq": tq, "tk": tk, "dk": dk, "dv": dv,
        "q": tensor(b, h, tq, dk),
        "k": tensor(b, g, tk, dk),
        "v": tensor(b, g, tk, dv),
        "key_valid": np.array([[1, 1, 1, 0], [1, 1, 0, 1]], dtype=np.uint8),
        "mask": np.ones((1, 1, tq, tk), dtype=np.uint8),
        "bias": np.full((1, h, tq, tk), 0.5),
        "causal": True,
        "align": "bottom_right",
        "window_left": 2,
        "window_right": 0,
        "scale": 0.25,
        "softcap": 8.0,
        "dout": np.ones((b, h, tq, dv)),
    }


def values(x):
    """A field's values as comparable: a tensor comes back from the bridge
    as (elements, strides), contiguous here; an array by its elements."""
    if isinstance(x, tuple):
        return np.asarray(x[0]).ravel()
    if isinstance(x, np.ndarray):
        return x.ravel()
    return x


def same(a, b):
    a, b = values(a), values(b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (a is not None and b is not None and a.shape == b.shape
                and np.array_equal(a, b))
    return a == b


# Keys of the engine's dict that are views of a field, not fields: the
# bytes of k and v in a block format (None otherwise).
DERIVED = {"k_blocks", "v_blocks"}


def test_the_dict_has_exactly_the_described_fields():
    names = set(_core.python_problem_fields())
    assert set(_core.default_problem()) == names | DERIVED
    assert set(every_field_set()) == names


def test_the_sample_sets_every_described_field():
    default = _core.default_problem()
    sample = every_field_set()
    unset = [n for n in _core.python_problem_fields() if same(sample[n], default[n])]
    assert not unset, f"every_field_set() leaves {unset} at their defaults: set them"


def test_every_described_field_survives_the_bridge():
    # dict -> Problem (problem_from_py) -> JSON -> Problem -> dict
    # (problem_to_py); the JSON codec is held to the description in C++.
    sample = every_field_set()
    back = _core.problem_from_json(_core.problem_to_json(sample), "sample.json")[0]
    lost = [n for n in _core.python_problem_fields() if not same(back[n], sample[n])]
    assert not lost, f"the bridge loses {lost}"


# ---- A declaration: every precision field the description marks as
# crossing the bridge (the stages among them) and the paths reach the
# harness's ImplInfo, read back in describe --json's spelling.

EVERY_PRECISION_FIELD = {
    "accum": "bf16", "p_cast": "f16", "s_cast": "f16", "exp_ulps": 7, "flush_to_zero": True,
    "key_block": 64, "q_cast": "e5m2", "score_accum": "f32", "softmax_accum": "f32",
    "pv_accum": "bf16",
    # q_cast "kv" is the C ABI's ATTNCHECK_Q_CAST_KV (field q_cast_kv); the
    # declaration's e5m2 is at least as loose as any K/V format.
    "paths": [{"name": "tiled", "q_cast": "kv", "pv_accum": "f16"}],
}


def declaration_json(precision):
    decl = _declare.implementation(name="every_precision_field", dtypes=["f32"],
                                   precision=precision)(lambda p: None)
    return _core.declaration_json(decl._declaration())


def test_every_described_declaration_field_survives_the_bridge():
    default = declaration_json(None)
    every = declaration_json(EVERY_PRECISION_FIELD)
    for name in _core.python_info_fields():
        assert name in every, f"the bridge's declaration has no {name}"
    # The paths are declared inside precision.
    assert [p["name"] for p in every["paths"]] == ["tiled"] and default["paths"] == []
    tiled = every["paths"][0]["precision"]
    lost = []
    for name in _core.python_precision_fields():
        where = tiled if name == "q_cast_kv" else every["precision"]
        if name not in where or where[name] == default["precision"][name]:
            lost.append(name)
    assert not lost, f"the bridge loses precision fields {lost}"
    assert every["precision"]["q_cast"] == "e5m2" and tiled["q_cast"] == "kv"
    assert tiled["pv_accum"] == "f16" and tiled["exp_ulps"] == 7


def test_the_sample_declaration_sets_every_precision_field_the_bridge_takes():
    given = set(EVERY_PRECISION_FIELD) | {"q_cast_kv"}
    missing = [n for n in _core.python_precision_fields() if n not in given]
    assert not missing, f"EVERY_PRECISION_FIELD leaves {missing} unset: set them"
