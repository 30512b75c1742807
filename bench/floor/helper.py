#!/usr/bin/env python3
"""The floor under a helper that re-arms perf events with random intervals (issue 57: "the
helper's CPU <= 0.5 % of the program's at 1 kHz"): the CPU time of a helper thread that
only wakes up every LOOK and, for one busy thread sampled at 1 kHz, arms a new interval
drawn at random (`PERF_EVENT_IOC_PERIOD`), with no profiler — against pyigprof's helper
process on the same busy program.

    python3 bench/floor/helper.py                 # 3 runs of 3 s per row, ~1.5 min
    python3 bench/floor/helper.py --runs 5 --lib /path/libpyigprof.so --out results.md

rearm.c runs the busy loop for SECONDS of its CPU time. Rows: the helper waking every 1, 4
and 16 ms and going back to sleep, or waking and re-arming; then pyigprof (`LD_PRELOAD`,
`PYIGPROF_ALL_PROCESSES=1`) on the program alone at 1 kHz and 250 Hz, its helper's CPU time
taken from its summary line. Needs a C compiler (`cc`). Standard library only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from measure import machine_line, one_library  # noqa: E402  (bench/measure.py)
PERIOD_NS = 1_000_000


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds of the busy loop per run")
    ap.add_argument("--lib", help="libpyigprof.so (default: this checkout's release build)")
    ap.add_argument("--out", help="write the table here as well")
    args = ap.parse_args()
    lib = one_library(args.lib, "bench/floor/helper")
    rows = []
    with tempfile.TemporaryDirectory(prefix="pyigprof-floor-helper-") as tmp:
        exe = os.path.join(tmp, "rearm")
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "rearm.c"), "-lpthread"], check=True)
        cases = [("helper thread, wakes every %d ms, sleeps again" % (look // 1_000_000), "sleep", look, None)
                 for look in (1_000_000, 4_000_000, 16_000_000)]
        cases += [("helper thread, wakes every %d ms, re-arms the event" % (look // 1_000_000), "rearm", look, None)
                  for look in (1_000_000, 4_000_000, 16_000_000)]
        cases += [("pyigprof, %d Hz" % hz, "none", 0, hz) for hz in (1000, 250)]
        shares = {name: [] for name, _, _, _ in cases}
        for _ in range(args.runs):
            for name, mode, look, hz in cases:
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                if hz:
                    log = os.path.join(tmp, "log.txt")
                    if os.path.exists(log):
                        os.unlink(log)
                    env.update(LD_PRELOAD=lib, PYIGPROF_ALL_PROCESSES="1", PYIGPROF_HZ=str(hz),
                               PYIGPROF_LOG=log, PYIGPROF_OUTPUT=os.path.join(tmp, "p.%p.gz"))
                out = subprocess.run([exe, mode, str(PERIOD_NS), str(max(look, 1)), str(args.seconds)],
                                     env=env, cwd=tmp, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit("bench/floor/helper: %s: %s" % (name, out.stderr.strip()))
                fields = dict(kv.split("=") for kv in out.stdout.split())
                program = float(fields["program_s"])
                if hz:
                    said = open(log).read()
                    m = re.search(r"helper process ([0-9.]+) s CPU", said)
                    if not m:
                        sys.exit("bench/floor/helper: no helper figure in pyigprof's line: %s" % said)
                    helper = float(m.group(1))
                else:
                    helper = float(fields["helper_s"])
                shares[name].append(100 * helper / program)
        lines = [
            "- command: `python3 bench/floor/helper.py %s`" % " ".join(sys.argv[1:]),
            machine_line(),
            "- one thread busy for %g s of CPU, sampled on a task-clock event at 1 kHz (mean); %d runs"
            % (args.seconds, args.runs),
            "",
            "| helper | its CPU, % of the program's: median (lowest to highest) |",
            "|---|---|",
        ]
        for name, _, _, _ in cases:
            xs = shares[name]
            lines.append("| %s | %.2f (%.2f to %.2f) |" % (name, statistics.median(xs), min(xs), max(xs)))
        print("\n".join(lines))
        if args.out:
            with open(args.out, "w") as f:
                f.write("# The helper's floor: waking up and re-arming\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
