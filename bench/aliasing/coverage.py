#!/usr/bin/env python3
"""Does the 95 % interval pyigprof-analyse prints cover the truth on a program that repeats
in step with the samples, and does the share vary across runs as much as sampling says?

    python3 bench/aliasing/coverage.py [--builds after=target/release] [--periods 1,2,3]
                                       [--rate 1000] [--runs 20] [--seconds 3] [--mode pure|cpu]
                                       [--out FILE]

Runs examples/phases.py PERIOD DURATION --mode (75 % of each period in phase_a, 25 % in
phase_b, timed by the program itself: `pure` spins timed by perf_counter, no system call,
the default; `cpu` by thread_time, a system call; it also prints its process CPU time) --runs times per
period under each build (a directory with libpyigprof.so and pyigprof-analyse), reads
phase_a's cumulative share of the profile and its `cum 95% CI` from `pyigprof-analyse
--top=0`, and compares them with the truth, phase_a's CPU time over the process's. Prints
per build and period: the mean error, the sd of the share across runs, the binomial sd of
a share of n samples (n the profile's samples), their ratio, and how many intervals
covered the truth. Standard library only.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PHASES = os.path.join(REPO, "examples", "phases.py")
# phases.py's mode (--mode): `pure` spins without system calls, `cpu` reads its CPU clock.
MODE = ["pure"]


def one(build, python, period, seconds, rate, tmp):
    out = os.path.join(tmp, "p.gz")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYIGPROF")}
    env.update(LD_PRELOAD=os.path.join(build, "libpyigprof.so"), PYIGPROF_HZ=str(rate),
               PYIGPROF_OUTPUT=out, PYIGPROF_QUIET="1")
    r = subprocess.run([python, PHASES, str(period), str(seconds), MODE[0]], env=env, check=True,
                       capture_output=True, text=True)
    truth = json.loads(r.stdout.splitlines()[-1])
    report = subprocess.run([os.path.join(build, "pyigprof-analyse"), "--top=0", out],
                            capture_output=True, text=True, check=True).stdout
    os.remove(out)
    samples = int(re.search(r"PERF_TICKS: ([\d,]+) samples", report).group(1).replace(",", ""))
    for line in report.splitlines():
        if " phase_a (" in line:
            f = line.split()
            cum = float(f[2])
            lo, hi = (float(x) for x in f[5].strip("[]").split("-"))
            return cum, (lo, hi), samples, 100.0 * truth["a"] / truth["process"]
    sys.exit("coverage: no phase_a in the report:\n" + report[:2000])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", default="after=" + os.path.join(REPO, "target", "release"))
    parser.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python")
    parser.add_argument("--periods", default="1,2,3")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mode", default="pure", choices=["pure", "cpu"])
    parser.add_argument("--out")
    args = parser.parse_args()
    MODE[0] = args.mode
    lines = ["| build | period | runs | mean error (points) | sd across runs | binomial sd | ratio | intervals covering the truth |",
             "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="pyigprof-coverage-") as tmp:
        for name, build in (b.split("=", 1) for b in args.builds.split(",")):
            for period_ms in (float(p) for p in args.periods.split(",")):
                rows = [one(build, args.python, period_ms / 1000, args.seconds, args.rate, tmp)
                        for _ in range(args.runs)]
                errors = [cum - truth for cum, _, _, truth in rows]
                covered = sum(lo <= truth <= hi for _, (lo, hi), _, truth in rows)
                n = statistics.mean(s for _, _, s, _ in rows)
                p = statistics.mean(cum for cum, _, _, _ in rows) / 100
                binomial = 100 * math.sqrt(p * (1 - p) / n)
                sd = statistics.stdev(errors)
                line = "| %s | %g ms | %d | %+.2f | %.2f | %.2f | %.2f | %d/%d (%.0f %%) |" % (
                    name, period_ms, len(rows), statistics.mean(errors), sd, binomial,
                    sd / binomial, covered, len(rows), 100.0 * covered / len(rows))
                lines.append(line)
                print(line, flush=True)
    text = "`%s`\n\n%s\n" % (" ".join(["python3", "bench/aliasing/coverage.py"] + sys.argv[1:]),
                            "\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
