"""The pytest plugin (attncheck.pytest): one test per (implementation,
dtype, property), failure reports as messages, skips, xfail from the
expected-failures file, -k and -x."""

import json
import textwrap

MODULE = textwrap.dedent('''
    import numpy as np
    import attncheck

    def attention(p, scale):
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (p.q, p.k, p.v))
        s = np.einsum("bhid,bhjd->bhij", q, k) * scale
        w = np.exp(s - s.max(-1, keepdims=True))
        return ((w / w.sum(-1, keepdims=True)) @ v).astype(p.numpy_dtype)

    @attncheck.implementation(name="good", dtypes=["f64", "f32"], features=["scale"])
    def good(p):
        return attention(p, p.scale)

    @attncheck.implementation(name="noscale", dtypes=["f64"], features=["scale"])
    def noscale(p):
        return attention(p, 1.0)
''')


def run(pytester, *args):
    pytester.makepyfile(test_impls=MODULE)
    return pytester.runpytest_subprocess("-p", "attncheck.pytest", "-p", "no:cacheprovider",
                                         "--attncheck-save-failures",
                                         str(pytester.path / "failures"), *args)


def test_one_test_per_implementation_dtype_and_property(pytester):
    result = run(pytester, "--collect-only", "-q")
    lines = [l for l in result.outlines if "::" in l]
    assert "test_impls.py::good::MatchesOracle[f64]" in lines
    assert "test_impls.py::good::MatchesOracle[f32]" in lines
    assert "test_impls.py::noscale::RowSumsToOne[f64]" in lines
    assert len(lines) == 3 * 25  # good in two dtypes, noscale in one; 25 properties


def test_failure_report_is_the_message_and_k_selects(pytester):
    result = run(pytester, "-k", "MatchesOracle or EmptyRowsAreRejected")
    result.assert_outcomes(passed=2, failed=1, skipped=3)
    result.stdout.fnmatch_lines([
        "*FAILED MatchesOracle on noscale (f64)*",
        "*shrunk problem:*",
        "*diagnosis: output matches attention with scale = 1*",
        "*fixture: *noscale-f64-MatchesOracle.json*",
    ])
    # EmptyRowsAreRejected needs masks these implementations do not declare.
    result.stdout.no_fnmatch_line("*Traceback*")


def test_x_stops_at_the_first_failure(pytester):
    result = run(pytester, "-x", "-k", "noscale and (MatchesOracle or RowSumsToOne)")
    result.assert_outcomes(failed=1)


def test_expected_failures_are_xfail(pytester):
    expected = pytester.path / "expected.json"
    expected.write_text(json.dumps([{"impl": "noscale", "property": "MatchesOracle",
                                     "reason": "forgets the scale"}]))
    result = run(pytester, "-k", "noscale and MatchesOracle",
                 "--attncheck-expected-failures", str(expected))
    result.assert_outcomes(xfailed=1)


def test_a_known_finding_by_cause_is_xfail_and_another_cause_hides_nothing(pytester):
    # The finding's fixture: the failure saved by a first run.
    saved = pytester.path / "saved"
    run(pytester, "-k", "noscale and MatchesOracle", "--attncheck-save-failures", str(saved))
    fixture = saved / "noscale-f64-MatchesOracle.json"
    assert fixture.is_file()
    expected = pytester.path / "expected.json"
    expected.write_text(json.dumps([{"impl": "noscale", "cause": "scale_one", "finding": "N1",
                                     "reason": "forgets the scale", "fixture": str(fixture)}]))
    result = run(pytester, "-rx", "-k", "noscale and MatchesOracle",
                 "--attncheck-expected-failures", str(expected))
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*known finding N1 (scale_one): forgets the scale*"])
    # A cause that does not explain the counterexample expects nothing.
    expected.write_text(json.dumps([{"impl": "noscale", "cause": "empty_row_nan", "finding": "N2",
                                     "reason": "NaN rows", "fixture": str(fixture)}]))
    result = run(pytester, "-k", "noscale and MatchesOracle",
                 "--attncheck-expected-failures", str(expected))
    result.assert_outcomes(failed=1)


def _verdicts(result):
    # "PASSED test_impls.py::good::X[f64]" lines of -rA, as a set: under
    # xdist they come in the order the workers finish.
    return sorted(l.split(" - ")[0] for l in result.outlines
                  if l.split(" ")[0] in ("PASSED", "FAILED", "SKIPPED", "XFAIL", "XPASS")
                  and "::" in l)


def test_pytest_xdist_gives_the_verdicts_of_one_process(pytester):
    # Each xdist worker has its own checkers and worker interpreters; the
    # verdicts are those of one process (-p xdist loads it even where
    # plugin autoloading is off).
    pytest = __import__("pytest")
    pytest.importorskip("xdist")  # ci/bootstrap installs python3-pytest-xdist
    sel = ["-rA", "-k", "MatchesOracle or RowSumsToOne or PermutationEquivariance"]
    one = run(pytester, *sel)
    one.assert_outcomes(passed=8, failed=1)
    many = run(pytester, "-p", "xdist", "-n", "2", *sel)
    many.assert_outcomes(passed=8, failed=1)
    assert "2 workers" in many.stdout.str() or "gw1" in many.stdout.str()
    assert _verdicts(many) == _verdicts(one)
    assert len(_verdicts(one)) == 9


def test_saved_failures_are_replayed_and_a_fixed_one_is_moved_aside(pytester):
    # The failure database: the second run replays the fixture the first
    # saved; after the fix, the next run says it now passes and moves it.
    sel = ("-k", "noscale and MatchesOracle")
    first = run(pytester, *sel)
    first.assert_outcomes(failed=1)
    assert "attncheck: replayed" not in first.stdout.str()
    second = run(pytester, *sel)
    second.assert_outcomes(failed=1)
    second.stdout.fnmatch_lines(["attncheck: replayed 1 saved failure: 1 still fail, 0 now pass"])
    fixed = MODULE.replace("return attention(p, 1.0)", "return attention(p, p.scale)")
    pytester.makepyfile(test_impls=fixed)
    after = pytester.runpytest_subprocess("-p", "attncheck.pytest", "-p", "no:cacheprovider",
                                          "--attncheck-save-failures",
                                          str(pytester.path / "failures"), *sel)
    after.assert_outcomes(passed=1)
    after.stdout.fnmatch_lines(
        ["attncheck: replayed 1 saved failure: 0 still fail, 1 now pass (moved to */failures/fixed/)"])
    assert (pytester.path / "failures" / "fixed" / "noscale-f64-MatchesOracle.json").exists()


def test_verbose_says_what_check_says_of_a_pass(pytester):
    result = run(pytester, "-v", "-k", "good and RowSumsToOne")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*good::RowSumsToOne[[]f64[]] PASSED*",
                                 "    * cases, max budget used *"])


def test_the_printed_reproduce_and_rerun_lines_work_as_pasted(pytester):
    # A user's walk: the planted bug fails under pytest; the reproduce and
    # rerun lines it prints, pasted into a shell in the same folder (with
    # `attncheck` on the PATH), fail the same way.
    import os
    import subprocess
    from conftest import attncheck_command
    result = run(pytester, "-k", "noscale and MatchesOracle")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    reproduce = next(l.strip()[len("reproduce: "):] for l in out.splitlines()
                     if l.strip().startswith("reproduce: "))
    rerun = next(l.split("(rerun: ", 1)[1].rstrip(")") for l in out.splitlines() if "(rerun: " in l)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(attncheck_command())) + os.pathsep + env["PATH"]
    for line in (reproduce, rerun):
        done = subprocess.run(["bash", "-c", line], cwd=pytester.path, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 1, line + "\n" + done.stdout + done.stderr
        assert "FAILED MatchesOracle on noscale" in done.stdout, done.stdout
