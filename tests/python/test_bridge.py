"""attncheck.check on Python implementations, each broken in a way
isolation must survive: each failure comes back with its shrunk problem
and fixture while the run goes on."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import attncheck
import impls
from conftest import attncheck_command

IMPLS = impls.__file__


def check_one(impl, tmp_path, prop="MatchesOracle", **kw):
    result = attncheck.check(impl, properties=[prop, "RowSumsToOne"],
                             save_failures=str(tmp_path), **kw)
    assert [o.property for o in result] == [prop, "RowSumsToOne"]
    return result


def test_correct_implementation_passes(tmp_path):
    result = attncheck.check(impls.np_ref_f64, properties=["MatchesOracle", "EmptyRowsAreRejected",
                                                           "PermutationEquivariance"],
                             save_failures=str(tmp_path))
    assert result.ok, str(result)
    assert [o.status for o in result] == ["passed"] * 3
    assert all(o.cases > 0 for o in result)
    # str() prints what `attncheck check` prints, per property.
    text = str(result).splitlines()
    assert text[0].startswith(f"attncheck {attncheck._core.version}: seed ")
    line = next(l for l in text if "MatchesOracle" in l)
    assert line.startswith("passed      np_ref_f64 ") and " cases, max budget used " in line
    assert text[-1] == "3 passed, 0 failed, 0 skipped, 0 unsupported, 0 xfail, 0 xpass, 0 not-run"


def test_broken_fails_with_shrunk_counterexample_diagnosis_and_fixture(tmp_path):
    result = attncheck.check(impls.np_forgets_scale, properties=["MatchesOracle"],
                             save_failures=str(tmp_path), report=str(tmp_path / "r.json"))
    assert not result.ok
    o = result.outcomes[0]
    assert o.status == "failed"
    assert "scale_one" in o.diagnosis
    assert o.counterexample["dk"] == 1 and o.counterexample["dv"] == 1
    assert os.path.exists(o.fixture)
    assert o.problem.dk == 1 and o.problem.dtype == "f64"
    assert "--impl np_forgets_scale --property MatchesOracle" in o.reproduce
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["results"][0]["status"] == "failed"
    assert report["implementations"][0]["origin"].endswith("impls.py")
    # The fixture replays to the same failure, from Python and from the command.
    assert attncheck.replay(o.fixture, impls.np_forgets_scale).status == "failed"
    assert attncheck.replay(o.fixture, impls.np_ref_f64).status == "passed"
    # A folder replays every fixture in it.
    (tmp_path / "db").mkdir()
    shutil.copy(o.fixture, tmp_path / "db")
    folder = attncheck.replay(tmp_path / "db", impls.np_forgets_scale)
    assert [x.status for x in folder] == ["failed"]
    run = subprocess.run([attncheck_command(), "replay", o.fixture, "--python",
                          f"{IMPLS}:np_forgets_scale"], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED MatchesOracle on np_forgets_scale" in run.stdout


def test_jobs_give_the_outcomes_and_report_of_one_process(tmp_path):
    # check(jobs=N) runs the properties in N processes, each with its own
    # worker: the outcomes, their order, the fixtures and the report are
    # those of jobs=1 (a failing and a hanging implementation included).
    props = ["MatchesOracle", "RowSumsToOne", "EmptyRowsAreRejected", "PermutationEquivariance"]
    for impl, kw in ((impls.np_forgets_scale, {}), (impls.np_hangs, {"timeout_ms": 300})):
        runs = []
        for jobs in (1, 3):
            out = tmp_path / f"{impl.name}-{jobs}"
            shutil.rmtree(tmp_path / "fx", ignore_errors=True)  # not replayed: compared
            result = attncheck.check(impl, properties=props, save_failures=str(tmp_path / "fx"),
                                     report=str(out.with_suffix(".json")), jobs=jobs, **kw)
            runs.append((result, out.with_suffix(".json").read_bytes()))  # no timings in it
        (one, one_report), (three, three_report) = runs
        assert [o.property for o in three] == props
        assert [(o.status, o.message, o.fixture) for o in three] == \
            [(o.status, o.message, o.fixture) for o in one]
        assert three_report == one_report
        assert any(o.status == "failed" for o in one)
    assert attncheck.check(impls.np_ref_f64, properties="RowSumsToOne", cases=3,
                           save_failures=None, jobs=None).ok
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="jobs:"):
            attncheck.check(impls.np_ref_f64, properties="RowSumsToOne", jobs=bad)


def test_crash_is_a_failure_and_the_run_goes_on(tmp_path):
    result = check_one(impls.np_crashes, tmp_path)
    for o in result:
        assert o.status == "failed"
        assert "crashed with signal 11 (SIGSEGV" in o.message
        assert o.counterexample["tk"] == 3  # the smallest problem that crashes
        assert os.path.exists(o.fixture)


def test_hang_is_a_failure_and_later_properties_keep_their_own_verdict(tmp_path):
    result = check_one(impls.np_hangs, tmp_path, timeout_ms=300)
    first, second = result.outcomes
    assert first.status == "failed"
    assert "did not return" in first.message
    assert first.counterexample["tq"] == 2
    # Called again (docs/isolation.md): its own hanging case, not shrunk.
    assert second.status == "failed"
    assert "did not return" in second.message
    assert second.counterexample["tq"] >= 2


def test_exception_is_a_failure_naming_it_and_the_line(tmp_path):
    result = check_one(impls.np_raises, tmp_path)
    for o in result:
        assert o.status == "failed"
        assert "ZeroDivisionError: division by zero" in o.message
        assert "impls.py:" in o.message and "in np_raises" in o.message
        assert o.counterexample["dk"] == 2


def test_wrong_shape_is_a_failure(tmp_path):
    o = check_one(impls.np_wrong_shape, tmp_path).outcomes[0]
    assert o.status == "failed"
    assert "out has shape (1, 2, 1, 1), expected (1, 1, 2, 1)" in o.message


def test_wrong_dtype_is_a_failure(tmp_path):
    o = check_one(impls.np_wrong_dtype, tmp_path).outcomes[0]
    assert o.status == "failed"
    assert "out has dtype float64, expected float32" in o.message


def test_fork_is_a_failure(tmp_path):
    o = check_one(impls.np_forks, tmp_path).outcomes[0]
    assert o.status == "failed"
    assert "forked" in o.message


def test_file_and_name_as_text(tmp_path):
    result = attncheck.check(f"{IMPLS}:np_ref_f64", properties="RowSumsToOne", cases=5,
                             save_failures=str(tmp_path))
    assert result.statuses() == {("f64", "RowSumsToOne"): "passed"}
    with pytest.raises(ValueError, match="declares no implementation 'nope'"):
        attncheck.check(f"{IMPLS}:nope")


def test_undeclared_dtype_is_skipped(tmp_path):
    result = attncheck.check(impls.np_ref_f64, properties="RowSumsToOne", dtypes=["f64", "f32"],
                             save_failures=str(tmp_path))
    assert [o.status for o in result] == ["passed", "skipped"]


def test_problem_json_round_trip_and_oracle():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    v = rng.standard_normal((1, 2, 5, 2)).astype(np.float32)
    p = attncheck.Problem(q, k, v, causal=True, align="bottom_right")
    assert p.dtype == "f32"
    back = attncheck.Problem.from_json(p.to_json())
    assert back.dtype == "f32" and back.causal and back.align == "bottom_right"
    assert np.array_equal(back.q, q) and np.array_equal(back.v, v)
    assert back.scale == np.float64(p.scale)
    r = attncheck.oracle(p)
    assert r["out"].shape == (1, 2, 3, 2) and r["weights"].shape == (1, 2, 3, 5)
    # The oracle against float64 arithmetic on the same (f32-exact) values.
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * p.scale
    s = np.where(p.allowed(), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(r["weights"], w, rtol=1e-12, atol=1e-300)
    assert r["uncertified"] == []


def test_problem_refuses_what_its_dtype_cannot_hold():
    q = np.full((1, 1, 1, 1), 0.1)
    with pytest.raises(ValueError, match="q: value 0.1 is not representable in f32"):
        attncheck.Problem(q, q, q, dtype="f32").to_json()
    with pytest.raises(ValueError, match="<json>"):
        attncheck.Problem.from_json('{"format": "attncheck-problem-1", "casual": true}')


def test_declaration_errors_are_plain_python_errors():
    with pytest.raises(ValueError, match="unknown feature 'casual'"):
        attncheck.implementation(name="x", dtypes=["f32"], features=["casual"])
    with pytest.raises(ValueError, match="unknown dtype 'f8'"):
        attncheck.implementation(name="x", dtypes=["f8"])
    with pytest.raises(ValueError, match="must match"):
        attncheck.implementation(name="Bad Name", dtypes=["f32"])


def test_command_line_lists_and_checks_a_python_file(tmp_path):
    exe = attncheck_command()
    listed = subprocess.run([exe, "list", "--python", IMPLS], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert "np_ref_f64" in listed.stdout and "np_crashes" in listed.stdout
    ok = subprocess.run([exe, "check", "--python", f"{IMPLS}:np_ref_f64", "--property",
                         "MatchesOracle", "--cases", "10", "--save-failures", str(tmp_path)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 passed" in ok.stdout
    bad = subprocess.run([exe, "check", "--python", f"{IMPLS}:nope"], capture_output=True,
                         text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().endswith("(it declares: np_ref_f64, np_forgets_scale, np_crashes, "
                                       "np_hangs, np_raises, np_wrong_shape, np_wrong_dtype, "
                                       "np_forks)")
    missing = subprocess.run([exe, "check", "--python", str(tmp_path / "none.py")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_command_line_failure_reproduces_and_replays(tmp_path):
    """attncheck check on a broken Python implementation: its printed
    reproduce line, run verbatim by a shell, fails again, and so does the
    printed rerun line, attncheck replay FIXTURE --python FILE.py:NAME."""
    exe = attncheck_command()
    spec = f"{IMPLS}:np_forgets_scale"
    run = subprocess.run([exe, "check", "--python", spec, "--property", "MatchesOracle",
                          "--dtype", "f64"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [line.strip() for line in run.stdout.splitlines()]
    reproduce = next(line[len("reproduce: "):] for line in lines
                     if line.startswith("reproduce: "))
    assert f" attncheck check --python {spec} --impl np_forgets_scale --property " \
        "MatchesOracle --dtype f64 --seed " in reproduce, reproduce
    fixture_line = next(line for line in lines if line.startswith("fixture: "))
    fixture = fixture_line.split()[1]
    rerun = fixture_line[fixture_line.index("(rerun: ") + len("(rerun: "):-1]
    assert rerun == f"attncheck replay {fixture} --python {spec}", rerun
    # As a user pastes them: the command found on PATH, in the same folder.
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(exe)) + os.pathsep +
               os.environ["PATH"])
    for command in (reproduce, rerun):
        again = subprocess.run(command, shell=True, capture_output=True, text=True,
                               cwd=tmp_path, env=env)
        assert again.returncode == 1, command + "\n" + again.stdout + again.stderr
        assert "FAILED MatchesOracle on np_forgets_scale (f64)" in again.stdout


SPINNER = '''
import time

import numpy as np

import attncheck


@attncheck.implementation(name="np_spins", dtypes=["f64"])
def np_spins(p):
    """Uses 50 ms of CPU time, then returns zeros."""
    start = time.process_time()
    while time.process_time() - start < 0.05:
        pass
    return np.zeros((p.batch, p.heads, p.tq, p.dv))
'''


def test_bench_measures_a_python_implementation_in_its_worker(tmp_path):
    """attncheck bench --python: one small point, each call made in the
    Python worker, whose CPU time the figures include (a call spinning
    50 ms of CPU there is at least that; the measuring process itself only
    waits for it)."""
    exe = attncheck_command()
    spinner = tmp_path / "spinner.py"
    spinner.write_text(SPINNER)
    report = tmp_path / "bench.json"
    run = subprocess.run([exe, "bench", "--python", f"{spinner}:np_spins", "--dtype", "f64",
                          "--seq", "8", "--heads", "2", "--dk", "4", "--repeats", "2",
                          "--warmup", "1", "--report", str(report)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    [spins] = json.loads(report.read_text())["results"]
    assert spins["impl"] == "np_spins" and spins["status"] == "ok", spins
    assert len(spins["times_s"]) == 2 and len(spins["cpu_s"]) == 2
    assert min(spins["times_s"]) >= 0.05 and min(spins["cpu_s"]) >= 0.05, spins
    assert spins["peak_bytes"] is not None


def test_backward_is_judged_and_a_broken_one_fails(tmp_path):
    """A backward callable declares FEATURE_BACKWARD: GradientsMatchOracle
    runs it in the worker, passes the correct gradients and fails a dQ
    that forgets the scale, with its shrunk problem and fixture."""
    import grad_impls
    ok = attncheck.check(grad_impls.np_grad_f64, properties=["GradientsMatchOracle"],
                         cases=40, save_failures=str(tmp_path))
    assert [o.status for o in ok] == ["passed"], str(ok)
    bad = attncheck.check(grad_impls.np_grad_forgets_scale, properties=["GradientsMatchOracle"],
                          cases=40, save_failures=str(tmp_path))
    [o] = bad.outcomes
    assert o.status == "failed", str(bad)
    assert "dq[" in o.message and "dk[" not in o.message.split("shrunk problem")[0], o.message
    assert os.path.exists(o.fixture)
    assert attncheck.replay(o.fixture, grad_impls.np_grad_forgets_scale).status == "failed"
    assert attncheck.replay(o.fixture, grad_impls.np_grad_f64).status == "passed"
    with pytest.raises(ValueError, match="backward=CALLABLE"):
        attncheck.implementation(name="x", dtypes=["f64"], features=["backward"])
