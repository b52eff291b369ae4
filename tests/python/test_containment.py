"""Issue 50's containment through the Python API: what a Python
implementation raises that is not an Exception is named by its type and
message; a SIGINT it sends to the harness fails its call (outside a PID
namespace) or never arrives (inside one), never a KeyboardInterrupt; a
Python file that starts a daemon while it is imported is refused, and the
daemon killed."""

import os
import subprocess
import time

import pytest

import attncheck
import contain_impls
from conftest import attncheck_command


def first_message(impl, tmp_path):
    result = attncheck.check(impl, properties="MatchesOracle", cases=3,
                             save_failures=str(tmp_path))
    (o,) = list(result)
    assert o.status == "failed"
    return o.message


@pytest.mark.parametrize("impl, text", [
    (contain_impls.np_keyboard_interrupt, "the implementation threw: KeyboardInterrupt"),
    (contain_impls.np_system_exit, "the implementation threw: SystemExit: 0"),
    (contain_impls.np_base_exception, "the implementation threw: BaseException: not an Exception"),
])
def test_base_exceptions_keep_type_and_message(impl, text, tmp_path):
    assert text in first_message(impl, tmp_path)


@pytest.mark.parametrize("fallback", ["1", "0"])
def test_a_signal_to_the_harness_is_the_implementations(fallback, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCHECK_NO_PID_NAMESPACE", fallback)
    result = attncheck.check(contain_impls.np_signals_harness, properties="MatchesOracle",
                             cases=3, save_failures=str(tmp_path))
    (o,) = list(result)
    if fallback == "1":
        assert o.status == "failed"
        assert "the implementation sent SIGINT (signal 2) to the harness" in o.message
    else:
        assert o.status == "passed", o.message


def test_a_daemon_started_at_import_is_refused(tmp_path):
    tag = f"1000.{os.getpid()}{int(time.time()) % 100000}"
    daemon = tmp_path / "daemon_at_import.py"
    daemon.write_text(f'''
import os
import attncheck
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", "{tag}"], {{}})
    os._exit(0)
os.wait()

@attncheck.implementation(name="np_daemon", dtypes=["f64"])
def np_daemon(p):
    return p.q
''')
    try:
        run = subprocess.run([attncheck_command(), "list", "--python", str(daemon)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2, run.stdout + run.stderr
        assert "left 1 process running while loading" in run.stderr
        left = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
        assert left.stdout == ""
    finally:
        subprocess.run(["pkill", "-KILL", "-f", f"sleep {tag}"])
