"""numpy workload: vectorised array arithmetic, a matrix product (BLAS), an
FFT, sorting, and a Python loop of small numpy calls (call overhead between
Python and numpy's C code).  Run with OPENBLAS_NUM_THREADS=1 (the harness
sets it) so that BLAS stays on one thread.

Usage: python numpy_work.py LOOPS    (one loop is a fixed unit of work)
"""
import sys

import numpy as np

rng = np.random.default_rng(42)
A = rng.standard_normal((160, 160))
V = rng.standard_normal(200_000)


def unit():
    m = A @ A.T                                   # BLAS dgemm
    spectrum = np.abs(np.fft.rfft(V))             # pocketfft
    s = np.sort(V)
    w = np.sqrt(np.abs(V)) * np.sin(V) + np.exp(-V * V)   # ufuncs
    small = 0.0
    for i in range(300):                          # many small numpy calls
        row = A[i % 160]
        small += float(row.dot(row)) + float(row.max())
    return m[0, 0] + spectrum[1] + s[0] + w.sum() + small


def main(loops):
    total = 0.0
    for _ in range(loops):
        total += unit()
    return total


if __name__ == "__main__":
    main(int(sys.argv[1]))
