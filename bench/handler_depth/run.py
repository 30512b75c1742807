#!/usr/bin/env python3
"""The handler's cost against the depth and the variety of the call stacks it samples
(issue 57): a program whose samples land in DISTINCT different chains of DEPTH Python
calls each (`stacks.py`), for each cell of a grid, under each library given; per cell, the
median over the runs of the profile's own `#pyigprof handler` line (the time each sample's
handler took, from its first instruction to its return: `median_ns`, `p99_ns`).

    python3 bench/handler_depth/run.py [--runs 3] [--python 3.12] [--hz 1000]
                                       [--depths 8,32,128,512]
                                       [--distinct 10,1000,100000] [--seconds 2]
                                       [--lib NAME=PATH ...] [--out FILE]

Builds pyigprof (cargo build --release) unless --lib is given; runs alternate between the
libraries, cell by cell. The program runs SECONDS of CPU time per run; its chains are a
hash of (chain, level) into a pool of 64 generated functions, each leaf a loop of 200 + 8 ×
DEPTH additions, so that most samples fall at the deepest level.

What it leaves out: the program's own slowdown (bench/overhead measures that), and the
helper process's time (which does not depend on the stacks).

Standard library only.
"""
import argparse
import gzip
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from measure import add_lib_option, libraries  # noqa: E402  (bench/measure.py)
from startup.run import interpreter  # noqa: E402  (bench/startup/run.py)


def handler_line(path):
    """The profile's `#pyigprof handler` fields (name → number)."""
    with gzip.open(path, "rt") as f:
        for line in f:
            m = re.search(r"#pyigprof handler ([^)]*)\)", line)
            if m:
                return {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.]+)", m.group(1))}
    sys.exit("bench/handler_depth: no `#pyigprof handler` line in %s" % path)


def one_run(python, lib, depth, distinct, args, rundir):
    for name in os.listdir(rundir):
        os.unlink(os.path.join(rundir, name))
    env = dict(os.environ, LD_PRELOAD=lib, PYIGPROF_HZ=str(args.hz), PYIGPROF_LOG="stderr",
               PYIGPROF_OUTPUT=os.path.join(rundir, "profile.%p.gz"))
    run = subprocess.run([python, os.path.join(HERE, "stacks.py"), str(depth), str(distinct),
                          str(args.seconds)], env=env, capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        sys.exit("bench/handler_depth: the program failed (%d): %s" % (run.returncode,
                                                                      run.stderr[-2000:]))
    [profile] = [os.path.join(rundir, n) for n in os.listdir(rundir) if n.endswith(".gz")]
    return handler_line(profile)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--hz", type=int, default=1000)
    parser.add_argument("--depths", default="8,32,128,512")
    parser.add_argument("--distinct", default="10,1000,100000")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="CPU time of one run, s (default 2)")
    add_lib_option(parser)
    parser.add_argument("--out", help="write the tables here as well")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    variety = [int(d) for d in args.distinct.split(",")]
    libs = libraries(args.lib, "bench/handler_depth")
    if not libs:
        subprocess.run(["cargo", "build", "--release"], cwd=REPO, check=True)
        libs.append(("pyigprof", os.path.join(REPO, "target", "release", "libpyigprof.so")))
    python = interpreter(args.python)
    results = {}
    with tempfile.TemporaryDirectory(prefix="pyigprof-handler-depth-") as rundir:
        for _ in range(args.runs):
            for depth in depths:
                for distinct in variety:
                    for name, path in libs:
                        results.setdefault((name, depth, distinct), []).append(
                            one_run(python, path, depth, distinct, args, rundir))
    out = ["Handler time per sample (`#pyigprof handler`), %s, %d Hz, %d runs of %.1f s of "
           "CPU each; median of the runs' medians (p99 in brackets), µs" % (
               python, args.hz, args.runs, args.seconds)]
    for name, _ in libs:
        out += ["", "%s:" % name, "",
                "| depth \\ distinct stacks | " + " | ".join("%d" % v for v in variety) + " |",
                "|---|" + "---|" * len(variety)]
        for depth in depths:
            cells = []
            for distinct in variety:
                runs = results[(name, depth, distinct)]
                cells.append("%.1f (%.0f)" % (
                    statistics.median(r["median_ns"] for r in runs) / 1e3,
                    statistics.median(r["p99_ns"] for r in runs) / 1e3))
            out.append("| %d | %s |" % (depth, " | ".join(cells)))
    text = "\n".join(out)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
