"""attncheck.check, replay and oracle: the engine driven from Python."""

import os
import sys

from . import _bridge, _core
from ._declare import DTYPES, Implementation
from ._problem import Problem

PROFILES = ("ci", "thorough")


def worker_command():
    """(program, args, env) of a worker interpreter: this interpreter
    running attncheck._worker, with this process's import path (the
    package's folder first), so the worker imports what the caller can."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [package_parent] + [p for p in sys.path if p and os.path.isdir(p)]
    seen = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    env = ["PYTHONPATH=" + os.pathsep.join(seen), "PYTHONUNBUFFERED=1"]
    return sys.executable, ["-m", "attncheck._worker"], env


def _display_path(path):
    """A path under the working directory relative to it (shorter
    reproduce lines), any other absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


class Outcome:
    """One (implementation, dtype, property): status is one of passed,
    failed, xfail, xpass, skipped, unsupported, not-run.

    message is the whole text report (for a failure: the offending elements,
    the shrunk problem, the diagnosis, the seed, the reproduce line and the
    fixture). As data: counterexample (the shrunk problem's shape, a dict),
    diagnosis (the names of the known bug classes that explain it),
    real_sizes (the real-size phase's counts, or None), expected (the known
    finding an xfail is explained by, or None), fixture
    (its path), reproduce (the command line that reruns the search), and
    problem / args, read from the fixture."""

    def __init__(self, d):
        self.property = d["property"]
        self.impl = d["impl"]
        self.dtype = d["dtype"]
        self.status = d["status"]
        self.cases = d["cases"]
        self.discarded = d["discarded"]
        self.max_budget_used = d["max_budget_used"]
        # The real-size phase's counts (SPEC 3): {"shapes", "judged",
        # "beyond_precision", "discarded", "unsupported"}, None without one.
        self.real_sizes = d["real_sizes"]
        self.message = d["message"]
        self.fixture = d["fixture"]
        self.counterexample = d["counterexample"]
        self.diagnosis = list(d["diagnosis"])
        # Known findings by cause (docs/cli.md): {"cause", "finding",
        # "reason", "fixture"} for an xfail it explains or an xpass whose
        # fixture now passes, else None; also_explained: the findings that
        # explain only part of a failure.
        self.expected = d.get("expected")
        self.also_explained = list(d.get("also_explained", []))
        # The failure database (docs/cli.md): {"fixture", "result" ("still
        # fails", "known", "now passes", "unreadable"), "note"} for the
        # saved fixture replayed before the search, else None.
        self.saved = d.get("saved")
        self.reproduce = next((line.strip()[len("reproduce: "):]
                               for line in self.message.splitlines()
                               if line.strip().startswith("reproduce: ")), None)
        self._fixture_data = None

    @property
    def ok(self):
        """Not failed and not passed against an expected failure."""
        return self.status not in ("failed", "xpass")

    def _load_fixture(self):
        if self._fixture_data is None and self.fixture and os.path.exists(self.fixture):
            d, args, meta = _core.load_fixture(self.fixture)
            self._fixture_data = (Problem._from_core(d, strided=False), args, meta)
        return self._fixture_data

    @property
    def problem(self):
        """The shrunk counterexample (from the fixture), or None."""
        f = self._load_fixture()
        return f[0] if f else None

    @property
    def args(self):
        """What the property drew beyond the problem (from the fixture), or None."""
        f = self._load_fixture()
        return f[1] if f else None

    def __repr__(self):
        return f"<{self.status} {self.property} on {self.impl} ({self.dtype})>"


class Result:
    """What attncheck.check found: outcomes in order (dtypes, then the
    catalog's properties), ok when none failed or passed against
    expectation."""

    def __init__(self, impl, seed, profile, outcomes):
        self.impl = impl
        self.seed = seed
        self.profile = profile
        self.outcomes = outcomes

    @property
    def ok(self):
        return all(o.ok for o in self.outcomes)

    @property
    def failures(self):
        return [o for o in self.outcomes if not o.ok]

    def statuses(self):
        """{(dtype, property): status}."""
        return {(o.dtype, o.property): o.status for o in self.outcomes}

    def __iter__(self):
        return iter(self.outcomes)

    def __len__(self):
        return len(self.outcomes)

    def __str__(self):
        # What `attncheck check` prints: one line per outcome (a failure's
        # or an xfail's whole report below it), the counts, and what the
        # saved failures replayed before the searches gave.
        lines = [f"attncheck {_core.version}: seed {self.seed}, profile {self.profile}"]
        for o in self.outcomes:
            long = o.status in ("failed", "xfail")
            lines.append(f"{o.status:<11} {o.impl:<24} {o.dtype:<4} {o.property:<28} "
                         f"{'' if long else o.message}".rstrip())
            if long:
                lines.append(o.message.rstrip("\n"))
        saved = _core.saved_failures_summary([o.saved for o in self.outcomes if o.saved])
        if saved:
            lines.append(saved)
        counts = {s: 0 for s in ("passed", "failed", "skipped", "unsupported", "xfail", "xpass",
                                 "not-run")}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
        return "\n".join(lines)

    def __repr__(self):
        return f"<attncheck.Result {self.impl}: {'ok' if self.ok else 'FAILED'} ({len(self)} outcomes)>"


def _implementation(impl):
    """(path, name) of an implementation: a declared one, or "FILE:NAME"."""
    if isinstance(impl, Implementation):
        return impl.path, impl.name
    if isinstance(impl, str) and ":" in impl:
        path, name = impl.rsplit(":", 1)
        return os.path.abspath(path), name
    raise TypeError("impl: an implementation declared with attncheck.implementation(...), or "
                    f"'FILE.py:NAME', not {impl!r}")


def _checker(impl, timeout_ms):
    if _bridge.in_worker:
        raise RuntimeError("attncheck.check or replay called while a worker imports the file "
                           "declaring the implementation: guard it with "
                           "`if __name__ == \"__main__\":`")
    path, name = _implementation(impl)
    program, args, env = worker_command()
    return _core.Checker(_display_path(path), name, program, args, env, int(timeout_ms))


def check(impl, properties=None, dtypes=None, profile="ci", seed=None, cases=None, strict=False,
          report=None, save_failures="attncheck-failures", timeout_ms=None,
          expected_failures=None, jobs=1):
    """Checks `impl` against the property catalog; returns a Result (never
    raises for a failing property).

    The implementation runs in a worker interpreter that imports its file
    (crashes, hangs and exceptions are failures with their counterexample);
    the checks run in C++ in this process. properties: names (default: the
    whole catalog); dtypes: names (default: every declared one); profile
    "ci" or "thorough"; seed: default ATTNCHECK_SEED, else the fixed CI
    seed; cases: per property (default: the profile's); strict: NaN at
    masked keys fails too; report: write the JSON report (SPEC 5.2) here;
    save_failures: the folder for failure fixtures (None: none saved);
    timeout_ms: CPU time per call (default 10000); expected_failures: the
    expected-failures file (default fixtures/expected-failures.json if it
    exists); jobs: processes the properties of each dtype run in, as `check
    --jobs` (1: this one; None: the usable CPUs, bounded by memory), each
    with its own worker; the outcomes are those of jobs=1, in order."""
    if profile not in PROFILES:
        raise ValueError(f"profile: {profile!r} is not one of {', '.join(PROFILES)}")
    timeout_ms = _core.default_timeout_ms if timeout_ms is None else timeout_ms
    checker = _checker(impl, timeout_ms)
    decl = checker.declaration()
    seed = _core.resolve_seed(None if seed is None else str(seed))
    if dtypes is None:
        # Every output format: each run draws its inputs' formats among the
        # combinations declared with that output.
        outs = set(decl["dtypes"]) | {c["out"] for c in decl["combos"]}
        dtypes = [d for d in DTYPES if d in outs]
    dtypes = [dtypes] if isinstance(dtypes, str) else list(dtypes)
    for d in dtypes:
        # A dtype, or one combination the run pins its inputs to.
        if not isinstance(d, str):
            raise ValueError(f"dtypes: {d!r} is not a dtype name")
        try:
            _core.parse_combo(d)
        except ValueError as e:
            raise ValueError(f"dtypes: {e}") from None
    catalog = [name for name, _ in _core.properties()]
    if properties is None:
        properties = catalog
    properties = [properties] if isinstance(properties, str) else list(properties)
    for p in properties:
        if p not in catalog:
            raise ValueError(f"properties: unknown property {p!r} (see attncheck.properties())")
    if expected_failures is None:
        expected_failures = _core.expected_failures_path
    if jobs is None:
        jobs = checker.default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: {jobs!r} is not a number of processes (an int >= 1, or None)")
    outcomes = []
    for d in dtypes:
        outcomes.extend(Outcome(o) for o in checker.run_many(
            properties, d, seed, profile, cases or 0, bool(strict), save_failures or "",
            expected_failures, jobs))
    if report:
        checker.write_report(str(report), seed, profile)
    return Result(decl["name"], seed, profile, outcomes)


def replay(fixture, impl, strict=None, profile=None, cases=None, timeout_ms=None):
    """Judges a saved fixture's case again on `impl` (in a worker), with the
    options the fixture recorded unless given; returns its Outcome. A
    folder (as `attncheck replay FOLDER`) replays its *.json fixtures, by
    name, and returns their Outcomes in a list."""
    timeout_ms = _core.default_timeout_ms if timeout_ms is None else timeout_ms
    checker = _checker(impl, timeout_ms)
    files = _core.fixture_files([str(fixture)])
    outcomes = [Outcome(checker.replay(f, strict, profile, cases or 0)) for f in files]
    return outcomes if os.path.isdir(str(fixture)) else outcomes[0]


def oracle(problem):
    """The certified exact result of `problem` (an attncheck.Problem): a
    dict of float64 arrays "out" [b][h][tq][dv], "weights" [b][h][tq][tk],
    "lse" [b][h][tq] (and "dq", "dk", "dv" when the problem has dout), each
    element the correctly rounded double of the exact value, except those
    listed in "uncertified" as (array, index)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"oracle: expected an attncheck.Problem, not {type(problem).__name__}")
    return _core.oracle(problem._to_core())


def properties():
    """[(name, statement)] of the property catalog, in order."""
    return list(_core.properties())
