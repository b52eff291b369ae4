"""exp_ulps for NumPy: measures np.exp's error in ulps (the number a Python
implementation declares as exp_ulps, SPEC 4.1) in float32 and float64 over
the arguments a softmax gives it, s_j - m in [ln of the smallest normal, 0].
NumPy dispatches float32 exp (and float64 on AVX512F) to its own SIMD code,
so the result depends on the CPU: run it where the kernel runs. References:
float64 for float32, np.longdouble (x87's 64-bit significand) for float64.
docs/plugins-and-packaging.md "Choosing exp_ulps" quotes it.
  python3 exp_ulps.py [--check MAX_F64 MAX_F32]
"""
import sys

import numpy as np


def ulps(got, exact, p):
    _, e = np.frexp(exact)
    return np.abs(got.astype(np.longdouble) - exact) / np.ldexp(np.longdouble(1), e - p)


def main():
    rng = np.random.default_rng(20260101)
    n = 1 << 22
    x64 = np.concatenate([-np.arange(4096) / 4096.0, rng.uniform(-708.0, 0.0, n - 4096)])
    x32 = np.concatenate([-np.arange(4096, dtype=np.float32) / np.float32(4096),
                          rng.uniform(-87.0, 0.0, n - 4096).astype(np.float32)])
    u64 = ulps(np.exp(x64), np.exp(x64.astype(np.longdouble)), 53)
    u32 = ulps(np.exp(x32), np.exp(x32.astype(np.float64)).astype(np.longdouble), 24)
    d, f = float(u64.max()), float(u32.max())
    print(f"np.exp float64: max {d:.3f} ulps at x = {x64[u64.argmax()]!r} over {n} arguments "
          f"in [-708, 0] (NumPy {np.__version__})")
    print(f"np.exp float32: max {f:.3f} ulps at x = {x32[u32.argmax()]!r} over {n} arguments "
          f"in [-87, 0] (NumPy {np.__version__})")
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        if d > float(sys.argv[2]) or f > float(sys.argv[3]):
            print("above the documented maxima: update docs/plugins-and-packaging.md")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
