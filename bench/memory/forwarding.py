#!/usr/bin/env python3
"""What pyigprof's allocator functions cost a program that allocates, with the memory
profiler off (the default): `malloc` and `free` are pyigprof's in every process the library
is loaded into, and pass each call on to the C library's.

    python3 bench/memory/forwarding.py [--rounds 30] [--pairs 32000000] [--lib NAME=PATH ...]

Compiles forwarding.c (cc -O2), then runs it plainly and under each library, alternating
run by run; reports per library the median ns per malloc-free pair and the median of the
paired differences against the plain run of the same round, with a distribution-free 95 %
interval. What it leaves out: everything but the allocator functions' own path (the
library's start-up is in bench/startup), and a memory profiler that is on (bench/memory/run.py).
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from measure import add_lib_option, libraries, machine_line, median_interval, one_library  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=32_000_000,
                        help="malloc-free pairs per run")
    add_lib_option(parser)
    args = parser.parse_args()
    libs = libraries(args.lib, "forwarding.py") or [("pyigprof", one_library(None, "forwarding.py"))]
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "forwarding")
        subprocess.run(["cc", "-O2", "-o", program, os.path.join(HERE, "forwarding.c")], check=True)
        runs = [("plain", None)] + libs
        ns = {name: [] for name, _ in runs}
        for _ in range(args.rounds):
            for name, lib in runs:
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                if lib:
                    env["LD_PRELOAD"] = lib
                out = subprocess.run([program, str(args.pairs)], env=env, check=True,
                                     capture_output=True, text=True).stdout
                ns[name].append(float(out))
    print(machine_line())
    print("\n`forwarding.c`, %d malloc-free pairs a run, %d rounds (ns per pair: median, and the "
          "median of the differences against the plain run of the same round [95 %% interval])\n"
          % (args.pairs, args.rounds))
    print("| run | ns per pair | difference |")
    print("|---|---|---|")
    for name, _ in runs:
        median = median_interval(ns[name])[0]
        if name == "plain":
            print("| plain | %.2f | |" % median)
            continue
        diffs = [x - p for x, p in zip(ns[name], ns["plain"])]
        m, lo, hi = median_interval(diffs)
        print("| %s | %.2f | %+.2f [%+.2f, %+.2f] |" % (name, median, m, lo, hi))


if __name__ == "__main__":
    main()
