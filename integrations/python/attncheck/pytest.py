"""The pytest plugin: `pytest -p attncheck.pytest` (or, in a conftest.py,
`pytest_plugins = ["attncheck.pytest"]`).

Each implementation a test module declares with attncheck.implementation
(or lists in a module-level `attncheck_implementations`) becomes a group of
tests, one per (dtype, property): `test_mine.py::mine_f32::MatchesOracle[f32]`.
A failure's message is attncheck's failure report; skipped and unsupported
properties are skips with the reason; pairs listed in the expected-failures
file are xfail. `-k`, `-x`, `--lf` work as for any test. The implementation
runs in a worker interpreter (one per implementation, kept for the session,
replaced after a crash or hang); pytest's own process only runs the checks.
"""

import os

import pytest

from . import _api, _core
from ._declare import Implementation


def pytest_addoption(parser):
    group = parser.getgroup("attncheck", "attncheck (property checks of attention implementations)")
    group.addoption("--attncheck-profile", default="ci", choices=_api.PROFILES,
                    help="ci (default) or thorough")
    group.addoption("--attncheck-seed", default=None,
                    help="seed below 2^53 (default: ATTNCHECK_SEED, else the fixed CI seed)")
    group.addoption("--attncheck-cases", type=int, default=0,
                    help="cases per property (default: the profile's)")
    group.addoption("--attncheck-strict", action="store_true",
                    help="NaN at masked keys fails too, not only large values")
    group.addoption("--attncheck-timeout-ms", type=int, default=_core.default_timeout_ms,
                    help="CPU time per call of an implementation (default %(default)s)")
    group.addoption("--attncheck-save-failures", default="attncheck-failures",
                    help="folder for failure fixtures (default %(default)s)")
    group.addoption("--attncheck-expected-failures", default=None,
                    help="expected-failures file (default: fixtures/expected-failures.json "
                         "under the rootdir, if it exists)")


class AttncheckFailure(Exception):
    """A property failed (or passed against an expected failure)."""

    def __init__(self, outcome):
        super().__init__(outcome.message)
        self.outcome = outcome


class _Checkers:
    """One worker-backed checker per implementation, for the session."""

    def __init__(self, config):
        self.config = config
        self.checkers = {}
        self.saved = []  # each outcome's saved-failure replay (Outcome.saved)
        self.seed = _core.resolve_seed(config.getoption("attncheck_seed"))
        path = config.getoption("attncheck_expected_failures")
        if path is None:
            default = os.path.join(str(config.rootpath), _core.expected_failures_path)
            path = default if os.path.exists(default) else ""
        self.expected_failures = path

    def get(self, impl):
        key = (impl.path, impl.name)
        if key not in self.checkers:
            self.checkers[key] = _api._checker(impl, self.config.getoption("attncheck_timeout_ms"))
        return self.checkers[key]

    def close(self):
        self.checkers.clear()  # each checker's worker is stopped with it


_KEY = pytest.StashKey[_Checkers]()


def pytest_configure(config):
    config.stash[_KEY] = _Checkers(config)
    _CONFIG.append(config)
    config.addinivalue_line("markers", "attncheck: a property check of an attention implementation")


def pytest_terminal_summary(terminalreporter):
    # The failure database: what the saved fixtures replayed before the
    # searches gave (as `attncheck check` says it).
    checkers = terminalreporter.config.stash.get(_KEY, None)
    line = _core.saved_failures_summary(checkers.saved) if checkers is not None else ""
    if line:
        terminalreporter.write_line(f"attncheck: {line}")


_CONFIG = []  # the session's config, for the report hook below


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    # Under -v a passed property says what `check` says of it, on the line
    # below its PASSED.
    if report.when != "call" or not report.passed or not _CONFIG:
        return
    config = _CONFIG[-1]
    summary = dict(report.user_properties).get("attncheck_summary")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if summary and reporter is not None and config.option.verbose > 0:
        reporter.write_line(f"    {summary}")


def pytest_sessionfinish(session):
    checkers = session.config.stash.get(_KEY, None)
    if checkers is not None:
        checkers.close()


def _declared_here(collector, obj):
    if not isinstance(obj, Implementation):
        return False
    listed = getattr(collector.obj, "attncheck_implementations", ())
    return obj.path == str(collector.path) or any(obj is i for i in listed)


def pytest_pycollect_makeitem(collector, name, obj):
    if isinstance(collector, pytest.Module) and _declared_here(collector, obj):
        return ImplementationTests.from_parent(collector, name=obj.name, impl=obj)
    return None


class ImplementationTests(pytest.Collector):
    """The (dtype, property) tests of one implementation."""

    def __init__(self, *, impl, **kwargs):
        super().__init__(**kwargs)
        self.impl = impl

    def collect(self):
        for dtype in self.impl.dtypes:
            for prop, statement in _core.properties():
                yield PropertyItem.from_parent(self, name=f"{prop}[{dtype}]", impl=self.impl,
                                               prop=prop, dtype=dtype, statement=statement)


class PropertyItem(pytest.Item):
    """One (implementation, dtype, property)."""

    def __init__(self, *, impl, prop, dtype, statement, **kwargs):
        super().__init__(**kwargs)
        self.impl = impl
        self.prop = prop
        self.dtype = dtype
        self.statement = statement
        self.add_marker("attncheck")
        self.outcome = None

    def runtest(self):
        config = self.config
        checkers = config.stash[_KEY]
        checker = checkers.get(self.impl)
        self.outcome = o = _api.Outcome(checker.run(
            self.prop, self.dtype, checkers.seed, config.getoption("attncheck_profile"),
            config.getoption("attncheck_cases"), config.getoption("attncheck_strict"),
            config.getoption("attncheck_save_failures") or "", checkers.expected_failures))
        self.user_properties.append(("attncheck_status", o.status))
        if o.saved:
            checkers.saved.append(o.saved)
        if o.status == "passed":
            self.user_properties.append(("max_budget_used", f"{o.max_budget_used:.3g}"))
            # What `check` prints for it (cases, budget, real sizes, what was
            # discarded): pytest -v shows it after PASSED.
            self.user_properties.append(("attncheck_summary", o.message))
            return
        if o.status in ("skipped", "unsupported"):
            pytest.skip(f"{o.status}: {o.message}")
        if o.status == "xfail":
            if o.expected:
                e = o.expected
                pytest.xfail(f"known finding {e['finding']} ({e['cause']}): {e['reason']}")
            first = o.message.splitlines()[1].strip() if "\n" in o.message else o.message
            pytest.xfail(f"expected failure ({checkers.expected_failures}): {first}")
        raise AttncheckFailure(o)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, AttncheckFailure):
            return excinfo.value.outcome.message.rstrip("\n")
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.impl.name}: {self.prop} ({self.dtype})"
