#!/usr/bin/env python3
"""How wrong can a share be when the program repeats in step with the samples? A loop
that spends 75 % of each period in phase_a and 25 % in phase_b (its own measurement by
thread_time is the truth), swept over loop periods equal to the sampling interval, its
multiples and fractions, the kernel's 4 ms tick and periods just off them, profiled by:

- pyigprof as it runs by default (task-clock perf events, random intervals),
- pyigprof on POSIX CPU timers (PYIGPROF_PERF_EVENTS=0: the kernel's tick),
- py-spy at the same rate (it samples from outside, at wandering instants).

    python3 bench/aliasing/run.py [--python 3.12] [--rates 250,1000,4000] [--seconds 3]
                                  [--out bench/aliasing/results.md]

Prints, for every rate and period, phase_a's share as each tool saw it, and the largest
error (in points) of each tool over the sweep. py-spy comes from bench/overhead's venv
(bench/overhead/run.py makes it). Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

PHASES_FILE = os.path.join(REPO, "examples", "phases.py")


def share_from_folded(lines):
    """phase_a's share of the samples in phase_a or phase_b, from folded stacks
    `frame;frame COUNT` (py-spy's raw format, pyigprof-analyse --collapsed)."""
    a = b = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        if any(f.startswith("phase_a") for f in frames):
            a += int(count)
        elif any(f.startswith("phase_b") for f in frames):
            b += int(count)
    return 100.0 * a / (a + b) if a + b else float("nan"), a + b


def run(argv, env, cwd):
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("bench/aliasing: %s failed: %s" % (" ".join(argv[:3]), r.stderr[-500:]))
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--rates", default="250,1000,4000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out")
    args = parser.parse_args()
    venv = os.path.join(REPO, "bench", "overhead", ".venv-%s" % args.python)
    python = os.path.join(venv, "bin", "python")
    pyspy = os.path.join(venv, "bin", "py-spy")
    if not os.path.exists(pyspy):
        sys.exit("bench/aliasing: no py-spy in %s (bench/overhead/run.py --pythons %s makes it)"
                 % (venv, args.python))
    subprocess.run(["cargo", "build", "--release"], cwd=REPO, check=True)
    lib = os.path.join(REPO, "target", "release", "libpyigprof.so")
    analyse = os.path.join(REPO, "target", "release", "pyigprof-analyse")
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("PYIGPROF_")}
    rows, worst = [], {}
    with tempfile.TemporaryDirectory(prefix="pyigprof-aliasing-") as tmp:
        script = PHASES_FILE
        for rate in [int(r) for r in args.rates.split(",")]:
            interval = 1.0 / rate
            periods = sorted({interval / 2, interval, 2 * interval, 4 * interval,
                              1.03 * interval, 0.004, 0.0041})
            for period in periods:
                row = {"rate": rate, "period_ms": period * 1000}
                for tool in ["pyigprof", "pyigprof timers", "py-spy"]:
                    out = os.path.join(tmp, "out-%s" % tool.replace(" ", "-"))
                    if tool == "py-spy":
                        argv = [pyspy, "record", "-r", str(rate), "-f", "raw", "-o", out + ".txt",
                                "--", python, script, str(period), str(args.seconds)]
                        r = run(argv, base, tmp)
                        with open(out + ".txt") as f:
                            seen, n = share_from_folded(f)
                    else:
                        env = dict(base, LD_PRELOAD=lib, PYIGPROF_HZ=str(rate),
                                   PYIGPROF_OUTPUT=out + ".%p.gz", PYIGPROF_QUIET="1")
                        if tool == "pyigprof timers":
                            env["PYIGPROF_PERF_EVENTS"] = "0"
                        r = run([python, script, str(period), str(args.seconds)], env, tmp)
                        profile = next(p for p in os.listdir(tmp) if p.startswith(os.path.basename(out) + "."))
                        folded = run([analyse, os.path.join(tmp, profile), "--collapsed"], base, tmp)
                        os.remove(os.path.join(tmp, profile))
                        seen, n = share_from_folded(folded.stdout.splitlines())
                    # The program's own line (py-spy adds its own after it).
                    truth = json.loads(next(l for l in reversed(r.stdout.splitlines())
                                            if l.startswith("{")))
                    truth = 100.0 * truth["a"] / (truth["a"] + truth["b"])
                    row[tool] = (seen, n, truth)
                    worst[(tool, rate)] = max(worst.get((tool, rate), 0.0), abs(seen - truth))
                rows.append(row)
                print("%5d Hz, period %6.3f ms: %s" % (rate, period * 1000, "; ".join(
                    "%s %.1f %% of %d (truth %.1f)" % (t, *row[t]) for t in ["pyigprof", "pyigprof timers", "py-spy"])),
                    flush=True)
    lines = ["| rate | loop period | pyigprof (perf events) | pyigprof (timers) | py-spy | truth |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| %d Hz | %.3f ms | %.1f %% (%d) | %.1f %% (%d) | %.1f %% (%d) | %.1f %% |" % (
            row["rate"], row["period_ms"], row["pyigprof"][0], row["pyigprof"][1],
            row["pyigprof timers"][0], row["pyigprof timers"][1], row["py-spy"][0], row["py-spy"][1],
            row["pyigprof"][2]))
    lines += ["", "Largest error over the sweep, points of share:", "",
              "| rate | pyigprof (perf events) | pyigprof (timers) | py-spy |", "|---|---|---|---|"]
    for rate in sorted({r["rate"] for r in rows}):
        lines.append("| %d Hz | %.1f | %.1f | %.1f |" % (rate, worst[("pyigprof", rate)],
                     worst[("pyigprof timers", rate)], worst[("py-spy", rate)]))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("`bench/aliasing/run.py --python %s --rates %s --seconds %g` (phase_a's share; "
                    "in parentheses the ticks pyigprof weighed, the samples py-spy took; truth from the "
                    "program's thread_time)\n\n%s\n"
                    % (args.python, args.rates, args.seconds, text))


if __name__ == "__main__":
    main()
