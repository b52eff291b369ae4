"""attncheck from Python: property-based verification of attention
implementations (docs/python.md).

    import attncheck

    @attncheck.implementation(name="mine_f32", dtypes=["f32"], features=["causal"])
    def mine(p):                      # p: attncheck.Problem, NumPy arrays
        ...
        return out                    # [batch][heads][tq][dv], float32

    result = attncheck.check(mine)    # the engine in C++, `mine` in a worker
    assert result.ok, result

Under pytest: `pytest -p attncheck.pytest` makes each (implementation,
dtype, property) of the implementations a test module declares one test.
"""

from ._api import Outcome, Result, check, oracle, properties, replay, worker_command
from ._core import InputError, default_seed, version
from ._declare import DTYPES, FEATURES, Error, Implementation, Unsupported, declared, implementation
from ._problem import NUMPY_DTYPES, Problem

__version__ = version
__all__ = ["implementation", "check", "replay", "oracle", "properties", "Problem", "Result",
           "Outcome", "Implementation", "Error", "Unsupported", "InputError", "DTYPES",
           "FEATURES", "NUMPY_DTYPES", "declared", "default_seed", "worker_command"]
