#!/usr/bin/env python3
"""The floor under any in-process sampler on this machine (issue 39): what one sample
costs the sampled thread before the profiler's handler does any work — the kernel's timer
interrupt, the perf event's overflow, the signal's delivery and return — measured by
floor.c with sampling switched on and off between adjacent windows of fixed work.

    python3 bench/floor/run.py                  # every trigger at 250 Hz, 1, 4 and 10 kHz (~3 min)
    python3 bench/floor/run.py --seconds 2      # shorter: ~2 s of windows per row
    python3 bench/floor/run.py --out bench/floor/results-DATE.md

Needs a C compiler (`cc`). Writes a markdown table to stdout (and --out)."""

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RATES = [250, 1000, 4000, 10000]
TRIGGERS = [
    ("event-nosignal", "task-clock perf event, no signal: the timer interrupt and overflow alone"),
    ("event", "task-clock perf event, SIGPROF to the thread, empty handler (pyigprof's trigger)"),
    ("event-clock", "the same, the handler reads the thread's CPU clock (what pyigprof's handler does first)"),
    ("timer", "POSIX CPU timer, empty handler (checked on the scheduler tick: at most HZ)"),
]


def build(tmp):
    exe = os.path.join(tmp, "floor")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "floor.c")], check=True)
    return exe


def calibrate(exe):
    """Loop iterations per second of thread CPU time, from a short run without sampling."""
    out = subprocess.run([exe, "event-nosignal", "1000000000", "4", "5000000"],
                         capture_output=True, text=True, check=True).stdout
    fields = dict(kv.split("=") for kv in out.split())
    off_s = float(fields["off_s"])
    return 4 * 5_000_000 / off_s


def run(exe, trigger, rate, seconds, per_s):
    period = 1_000_000_000 // rate
    # a window holds about 25 samples at the rate asked (at least 10 ms of work)
    window_s = max(0.010, 25 / rate)
    work = int(per_s * window_s)
    windows = max(10, int(seconds / (2 * window_s)))
    proc = subprocess.run([exe, trigger, str(period), str(windows), str(work)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    fields = dict(kv.split("=") for kv in proc.stdout.split())
    fields["window_ms"] = f"{window_s * 1e3:.0f}"
    return fields


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="CPU seconds of windows per row (default 8)")
    ap.add_argument("--rates", default=",".join(map(str, RATES)), help="rates in Hz, comma-separated")
    ap.add_argument("--out", help="write the table here as well")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        per_s = calibrate(exe)
        lines = [
            "# The floor under an in-process sampler",
            "",
            f"- command: `python3 bench/floor/run.py {' '.join(sys.argv[1:])}`".replace(" `", " `").rstrip(),
            f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}; host: {platform.node()}, "
            f"{os.cpu_count()} CPUs, kernel {platform.release()}; load average before: "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            f"- work: {per_s / 1e6:.0f} M loop iterations per CPU second; windows of ~25 samples at the rate "
            "(at least 10 ms), sampling on and off in adjacent windows, alternating which comes first",
            "",
            "Per sample: (CPU time of the window with sampling − the window without) / the samples in it, "
            "median and quartiles over pairs of windows, and pooled over all of them. "
            "Floor ratio: 1 + median per-sample cost × samples per CPU second — the whole-cost ratio "
            "a profiler whose handler took no time at all would show.",
            "",
            "| trigger | rate asked | samples per CPU s | per sample, µs: median [q25, q75] | pooled µs | floor ratio | windows |",
            "|---|---|---|---|---|---|---|",
        ]
        print("\n".join(lines), flush=True)
        for trigger, _ in TRIGGERS:
            for rate in rates:
                r = run(exe, trigger, rate, args.seconds, per_s)
                if "error" in r:
                    row = f"| {trigger} | {rate} Hz | | {r['error']} | | | |"
                else:
                    real = int(r["samples"]) / float(r["on_s"])
                    med = float(r["median_us"])
                    row = (f"| {trigger} | {rate} Hz | {real:.0f} | {med:.2f} [{float(r['q25_us']):.2f}, "
                           f"{float(r['q75_us']):.2f}] | {float(r['pooled_us']):.2f} | "
                           f"{1 + med * 1e-6 * real:.4f} | {r['windows']} × {r['window_ms']} ms |")
                print(row, flush=True)
                lines.append(row)
        lines += ["", "Triggers:", ""] + [f"- `{t}`: {d}" for t, d in TRIGGERS]
        if args.out:
            with open(args.out, "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
