"""Declarations through the Python bridge: the precision traits it takes,
as the C ABI takes them."""

import pytest

import attncheck
from attncheck._declare import _precision
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
