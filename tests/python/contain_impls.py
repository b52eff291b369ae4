"""Python implementations that misbehave in the ways of issue 50's
containment (tests/python/test_containment.py): raising what is not an
Exception, signalling the harness."""

import os
import signal
import time

import attncheck
from impls import FEATURES, attention


def _harness_pid():
    """The harness's pid, as any process of a worker can read it: the
    argument after --attncheck-worker in its command line."""
    with open("/proc/self/cmdline", "rb") as f:
        args = f.read().split(b"\0")
    return int(args[args.index(b"--attncheck-worker") + 1])


def _declare(name):
    return attncheck.implementation(name=name, dtypes=["f64"], features=FEATURES,
                                    empty_rows="zero", precision={"accum": "f64"})


@_declare("np_keyboard_interrupt")
def np_keyboard_interrupt(p):
    raise KeyboardInterrupt


@_declare("np_system_exit")
def np_system_exit(p):
    raise SystemExit(0)


@_declare("np_base_exception")
def np_base_exception(p):
    raise BaseException("not an Exception")


@_declare("np_signals_harness")
def np_signals_harness(p):
    """Sends SIGINT to the harness, then answers correctly. In a PID
    namespace the harness has no pid: there is no such process."""
    try:
        os.kill(_harness_pid(), signal.SIGINT)
    except ProcessLookupError:
        pass
    time.sleep(0.1)
    return attention(p)
