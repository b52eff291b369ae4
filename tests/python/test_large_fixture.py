"""Issue 50: a fixture's memory is within a small multiple of its data, in
`oracle` and in `replay` (whose worker decodes the problem too): the text
read once, each tensor packed as it is parsed into room reserved once,
unpacked slice by slice into room that is not zeroed first, sent to the
worker from where it is, and decoded there slice by slice."""

import subprocess
import sys

from conftest import attncheck_command

# Runs the command and prints the largest resident set of the processes it
# started (the harness and its worker): a process of its own, so no other
# test's children count.
PEAK = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def write_zeros(path, q_elements, dk):
    with open(path, "w") as f:
        f.write('{"format": "attncheck-fixture-1", "args": {}, "expected": null, '
                '"meta": {"property": "MatchesOracle", "impl": "loop_f64", "dtype": "f64"}, '
                '"problem": {"format": "attncheck-problem-1", "dtype": "f64", "batch": 1, '
                f'"heads": 1, "tq": {q_elements // dk}, "tk": 1, "dk": {dk}, "dv": 1, '
                '"v": [0], "k": [0')
        f.write(",0" * (dk - 1))
        f.write('], "q": [0')
        f.write(",0" * (q_elements - 1))
        f.write("]}}")


def test_a_large_fixture_is_in_memory_about_once(tmp_path):
    # 2^24 zeros in q (128 MiB as doubles, 32 MiB of text). Measured on
    # the 2-core CI machine: 222 MiB in both commands (the program, the
    # oracle's per-row work arrays for dk 2^18); 346 MiB before (the text
    # grown by doubling, the packed bytes grown by doubling, unpacked into
    # zeroed room, a request copy in the harness and the worker).
    path = tmp_path / "zeros.json"
    write_zeros(path, 1 << 24, 1 << 18)
    for command in ("oracle", "replay"):
        out = subprocess.run([sys.executable, "-c", PEAK, attncheck_command(), command,
                              str(path)], capture_output=True, text=True, check=True).stdout
        code, peak_mib = (int(x) for x in out.split())
        assert code == 0, command
        assert peak_mib < 256, f"{command}: peak resident memory {peak_mib} MiB"
