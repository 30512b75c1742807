"""A small program with a known profile: pure-Python work, zlib compression (C, libz)
and SHA-256 hashing (C, libcrypto), each in a function of its own.

It measures the CPU time of each phase itself with process_time() and prints the
shares as JSON on its last line, so a profile can be checked against it.

    python3 examples/mixed.py [SECONDS]

(Runs on Python 2.7 too, where the CPU clock is time.clock.)
"""
from __future__ import division, print_function

import hashlib
import json
import sys
import time
import zlib

process_time = getattr(time, "process_time", None) or time.clock


def python_work(n):
    """Pure-Python arithmetic: time goes to the evaluator."""
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total


def squeeze(data, rounds):
    """zlib compression: time goes to libz's deflate."""
    size = 0
    for _ in range(rounds):
        size += len(zlib.compress(data, 9))
    return size


def digest(data, rounds):
    """SHA-256: time goes to libcrypto."""
    h = hashlib.sha256()
    for _ in range(rounds):
        h.update(data)
    return h.hexdigest()


def timed(fn, *args):
    start = process_time()
    fn(*args)
    return process_time() - start


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    data = bytes(bytearray(range(256)) * 4096) + b"pyigprof" * 50000  # ~1.4 MB, compressible
    spent = {"python_work": 0.0, "squeeze": 0.0, "digest": 0.0}
    begin = process_time()
    while process_time() - begin < seconds:
        spent["python_work"] += timed(python_work, 200000)
        spent["squeeze"] += timed(squeeze, data, 1)
        spent["digest"] += timed(digest, data, 20)
    total = process_time()
    print(json.dumps({"process_cpu_s": total, "phases_s": spent}))


if __name__ == "__main__":
    main()
