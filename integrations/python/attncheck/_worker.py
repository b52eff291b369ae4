"""python -m attncheck._worker --attncheck-worker PID MODE NAME PATH: an
isolated worker serving a Python file's implementations to the harness
(host/isolation.h). Started by the harness, never by hand."""

import sys

from . import _bridge, _core

if __name__ == "__main__":
    _bridge.in_worker = True
    sys.exit(_core.worker_main(sys.argv[1:]))
