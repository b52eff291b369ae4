"""Declarations through the Python bridge: the precision traits it takes,
as the C ABI takes them, by stage and by path (SPEC 4.1), and the path a
forward reports it took."""

import json
import subprocess

import pytest

import attncheck
from attncheck._declare import _precision
from conftest import attncheck_command
from impls import FEATURES, attention


def test_e4m3_is_a_p_cast_and_s_cast_but_e5m2_is_not():
    assert _precision({"p_cast": "e4m3", "s_cast": "e4m3"}, ["f32"])["p_cast"] == "e4m3"
    for key in ("p_cast", "s_cast"):
        with pytest.raises(ValueError, match=f"precision.{key}: unknown format 'e5m2'"):
            _precision({key: "e5m2"}, ["f32"])
    with pytest.raises(ValueError, match="precision.accum: unknown format 'e4m3'"):
        _precision({"accum": "e4m3"}, ["f32"])


@attncheck.implementation(name="np_ref_f64_e4m3_p", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision={"accum": "f64", "p_cast": "e4m3"})
def np_ref_f64_e4m3_p(p):
    return attention(p)


def test_an_e4m3_p_cast_declaration_loads_and_is_judged(tmp_path):
    # The harness reads the declaration back (its describe says e4m3) and
    # judges a correct implementation by it.
    result = attncheck.check(np_ref_f64_e4m3_p, properties=["MatchesOracle"], cases=20,
                             save_failures=str(tmp_path))
    assert result.ok, str(result)
    assert result.outcomes[0].status == "passed"


# ---- Precision by stage and by path (SPEC 4.1).

STAGED = {"accum": "f32", "q_cast": "f16", "score_accum": "f32", "softmax_accum": "f32",
          "pv_accum": "bf16",
          "paths": [{"name": "tiled", "pv_accum": "f32"},
                    {"name": "short.q", "q_cast": None, "pv_accum": "f16"}]}


def test_stages_and_paths_are_declared_with_the_declarations_keys_as_defaults():
    prec = _precision(STAGED, ["f32"])
    assert (prec["q_cast"], prec["score_accum"], prec["softmax_accum"], prec["pv_accum"]) == \
        ("f16", "f32", "f32", "bf16")
    tiled, short = prec["paths"]
    # A key a path does not give is the declaration's.
    assert tiled == {**{k: v for k, v in prec.items() if k != "paths"}, "name": "tiled",
                     "pv_accum": "f32"}
    assert tiled["name"] == "tiled" and tiled["q_cast"] == "f16" and tiled["pv_accum"] == "f32"
    assert short["q_cast"] is None and short["pv_accum"] == "f16"
    assert "paths" not in tiled
    # Without stages or paths a declaration means what it did.
    plain = _precision({"accum": "f32"}, ["f32"])
    assert plain["paths"] == []
    assert all(plain[s] is None for s in ("q_cast", "score_accum", "softmax_accum", "pv_accum"))
    assert _precision({"q_cast": "kv"}, ["f32"])["q_cast"] == "kv"


@pytest.mark.parametrize("precision, message", [
    ({"score_acum": "f32"}, r"precision: unknown field 'score_acum'"),
    ({"q_cast": "f8"}, r"precision.q_cast: unknown format 'f8'"),
    ({"pv_accum": "e5m2"}, r"precision.pv_accum: unknown format 'e5m2' .*an accumulation"),
    ({"score_accum": "e4m3"}, r"precision.score_accum: unknown format 'e4m3'"),
    ({"softmax_accum": "e4m3"}, r"precision.softmax_accum: unknown format 'e4m3'"),
    ({"paths": {"name": "a"}}, r"precision.paths: expected a list"),
    ({"paths": ["a"]}, r"precision.paths\[0\]: expected a dict"),
    ({"paths": [{"pv_accum": "f16"}]}, r"precision.paths\[0\]: the name None must"),
    ({"paths": [{"name": "Tiled"}]}, r"precision.paths\[0\]: the name 'Tiled' must"),
    ({"paths": [{"name": "a"}, {"name": "a"}]}, r"precision.paths\[1\]: the path name 'a' repeats"),
    ({"paths": [{"name": "a", "paths": []}]}, r"precision.paths\[a\]: unknown field 'paths'"),
    ({"paths": [{"name": "a", "pv_accum": "e5m2"}]},
     r"precision.paths\[a\].pv_accum: unknown format 'e5m2'"),
    # The declaration (f32 everywhere) is tighter than a path that
    # accumulates P.V in f16: older harnesses judge by the declaration alone.
    ({"accum": "f32", "paths": [{"name": "short", "pv_accum": "f16"}]},
     r"precision.paths\[short\]: the declaration's own precision is tighter than this path's "
     r"\(pv_accum f32 is tighter than f16\)"),
    ({"accum": "f32", "paths": [{"name": "q16", "q_cast": "f16"}]},
     r"precision.paths\[q16\]: .*q_cast none is tighter than f16"),
    ({"exp_ulps": 1, "paths": [{"name": "fast_exp", "exp_ulps": 8}]},
     r"precision.paths\[fast_exp\]: .*exp_ulps 1 is fewer than 8"),
])
def test_a_bad_stage_or_path_is_refused_in_one_line(precision, message):
    with pytest.raises(ValueError, match=message) as e:
        _precision(precision, ["f32"])
    assert "\n" not in str(e.value)


def test_the_declaration_refuses_a_bad_path_as_a_plain_python_error():
    with pytest.raises(ValueError, match=r"precision.paths\[1\]: the path name 'a' repeats"):
        attncheck.implementation(name="x", dtypes=["f32"],
                                 precision={"paths": [{"name": "a"}, {"name": "a"}]})


# Two paths, as a kernel that sums P.V of short rows in f16 would declare
# them (the declaration is the loosest of the two); each call says which
# it took.
TWO_PATHS = {"accum": "f64", "q_cast": "f16", "pv_accum": "f16", "exp_ulps": 4,
             "paths": [{"name": "short", "pv_accum": "f16"},
                       {"name": "long", "pv_accum": "f64"}]}


@attncheck.implementation(name="np_two_paths", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision=TWO_PATHS)
def np_two_paths(p):
    return {"out": attention(p), "path": "short" if p.tk <= 4 else "long"}


@attncheck.implementation(name="np_unknown_path", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision=TWO_PATHS)
def np_unknown_path(p):
    return {"out": attention(p), "path": "tiled"}


def test_a_two_path_implementation_that_reports_its_path_passes(tmp_path):
    result = attncheck.check(np_two_paths, properties=["MatchesOracle"], cases=30,
                             save_failures=str(tmp_path))
    assert result.ok, str(result)


def test_a_path_the_declaration_does_not_have_fails_the_call(tmp_path):
    result = attncheck.check(np_unknown_path, properties=["MatchesOracle"], cases=5,
                             save_failures=str(tmp_path))
    o = result.outcomes[0]
    assert o.status == "failed"
    assert "returned path 'tiled', which is not a declared path (declared paths are short, " \
        "long)" in o.message, o.message


def attention_in_f32(p):
    """The exact result with a relative error of half f32's unit roundoff
    (f64 problems may hold values beyond f32's range, so this stands for
    f32 arithmetic)."""
    return attention(p) * (1 + 2.0 ** -25)


# f32 errors, declared f32 with an f64 path: judged by f32 when the
# call says nothing, by f64 when it claims the exact path (a lie).
F32_WITH_EXACT_PATH = {"accum": "f32", "paths": [{"name": "exact", "accum": "f64"}]}


@attncheck.implementation(name="np_f32_says_nothing", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision=F32_WITH_EXACT_PATH)
def np_f32_says_nothing(p):
    return attention_in_f32(p)


@attncheck.implementation(name="np_f32_claims_exact", dtypes=["f64"], features=FEATURES,
                          empty_rows="zero", precision=F32_WITH_EXACT_PATH)
def np_f32_claims_exact(p):
    return {"out": attention_in_f32(p), "path": "exact"}


def test_the_reported_path_is_the_precision_a_call_is_judged_by(tmp_path):
    honest = attncheck.check(np_f32_says_nothing, properties=["MatchesOracle"], cases=30,
                             save_failures=str(tmp_path))
    assert honest.ok, str(honest)
    lie = attncheck.check(np_f32_claims_exact, properties=["MatchesOracle"], cases=30,
                          save_failures=str(tmp_path))
    assert lie.outcomes[0].status == "failed", str(lie)
    assert "out of tolerance" in lie.outcomes[0].message, lie.outcomes[0].message


def test_describe_prints_the_stages_and_every_path(tmp_path):
    exe = attncheck_command()
    run = subprocess.run([exe, "describe", "np_two_paths", "--python", __file__],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "  precision:     accum f64, p_cast f64, s_cast f64 (accum), exp_ulps 4, " \
        "key_block 0 (one pass), q_cast f16, pv_accum f16\n" in run.stdout, run.stdout
    assert "\n  path short: accum f64, p_cast f64, s_cast f64 (accum), exp_ulps 4, key_block 0 " \
        "(one pass), q_cast f16, pv_accum f16; flush to zero no, ftz_formats 0 (flush to zero " \
        "decides)\n" in run.stdout, run.stdout
    assert "\n  path long: " in run.stdout and "pv_accum f64;" in run.stdout
    run = subprocess.run([exe, "describe", "np_two_paths", "--python", __file__, "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    j = json.loads(run.stdout)
    assert j["precision"]["q_cast"] == "f16" and j["precision"]["pv_accum"] == "f16"
    assert j["precision"]["score_accum"] is None and j["precision"]["q_cast_kv"] is False
    assert [p["name"] for p in j["paths"]] == ["short", "long"]
    assert j["paths"][1]["precision"]["pv_accum"] == "f64"


def test_a_file_declaring_a_bad_path_is_a_load_error_of_one_line(tmp_path):
    bad = tmp_path / "bad_path.py"
    bad.write_text("import attncheck\n\n"
                   "@attncheck.implementation(name='bad', dtypes=['f32'],\n"
                   "    precision={'accum': 'f32', 'paths': [{'name': 'p', 'pv_accum': 'f16'}]})\n"
                   "def bad(p):\n"
                   "    return None\n")
    run = subprocess.run([attncheck_command(), "describe", "bad", "--python", str(bad)],
                         capture_output=True, text=True)
    assert run.returncode == 2, run.stdout + run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "precision.paths[p]: the declaration's own precision is tighter than this path's " \
        "(pv_accum f32 is tighter than f16)" in run.stderr, run.stderr
