"""The programs bench/diff-calibration profiles: each spends a fixed CPU time (its first
argument, seconds) in a known mix of functions, and `PYIGPROF_BENCH_HEAVY=F` makes one of
them do F times its work (the "regression" the comparisons must find), without moving a
line: `--diff` matches functions by name and file.

    python3 programs.py two SECONDS        # compute_hot ~75 %, long_mod ~25 %
    python3 programs.py periodic SECONDS   # phase_a 75 % / phase_b 25 % of a ~1 ms CPU period
"""
import os
import sys
import time

HEAVY = float(os.environ.get("PYIGPROF_BENCH_HEAVY", "1"))


def compute_hot(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def long_mod(n):
    total = 0
    for i in range(n):
        total += (i << 40) % 1000003
    return total


def phase_a(n):
    x = 0
    for _ in range(n):
        x += 1
    return x


def phase_b(n):
    x = 0
    for _ in range(n):
        x += 1
    return x


def two(seconds):
    end = time.process_time() + seconds
    hot = int(round(5500 * HEAVY))
    while time.process_time() < end:
        compute_hot(hot)
        long_mod(1200)


def periodic(seconds):
    # Iterations, not a clock, set the period: the loop repeats in step with CPU time
    # (~1 ms per period here; 75 % / 25 % of it in the two phases).
    a, b = int(round(15000 * HEAVY)), 5000
    end = time.process_time() + seconds
    while time.process_time() < end:
        for _ in range(100):
            phase_a(a)
            phase_b(b)


if __name__ == "__main__":
    {"two": two, "periodic": periodic}[sys.argv[1]](float(sys.argv[2]))
