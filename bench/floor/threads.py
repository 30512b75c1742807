#!/usr/bin/env python3
"""The floor under a per-thread sampler's thread start and end (issue 57): what starting and
joining a short thread costs on this machine when each thread gets a sampling trigger of
its own — a POSIX CPU timer, a perf event the thread opens itself, or one another thread
opens for it (pyigprof's scheme: its helper process holds the descriptors) — with no
profiler around it, and pyigprof's own cost on the same program.

    python3 bench/floor/threads.py                      # 10 rounds, ~1 min
    python3 bench/floor/threads.py --rounds 20 --lib /path/libpyigprof.so --out results.md

threads.c starts THREADS threads one after another (each joined before the next), each
running a short loop (`--work` iterations, ~25 µs here). Each variant runs twice per round,
with 2,000 and with 200 threads, and the cost per thread is the difference over the 1,800
threads between them, so that what a process pays once (start, exit, pyigprof's profile)
cancels. CPU time is the process's and every descendant's (bench/measure.py: wait4, plus
pyigprof's helper process, which the program does not wait for, reaped here). The table
gives per thread the median over rounds of (variant − the plain run of the same round), with
a distribution-free 95 % interval.

Needs a C compiler (`cc`). Standard library only.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from measure import machine_line, one_library, median_interval, run_once  # noqa: E402  (bench/measure.py)

MANY, FEW = 2000, 200
PERIOD_NS = 1_000_000
VARIANTS = [
    ("timer", "timer", {}, "POSIX CPU timer the thread creates and deletes (pyigprof's `PYIGPROF_PERF_EVENTS=0`)"),
    ("event-self", "event-self", {}, "task-clock perf event the thread opens and closes itself "
     "(descriptor in the program's table, which pyigprof keeps free of its own)"),
    ("event-helper", "event-helper", {}, "the event opened by a helper thread while the new thread "
     "runs (a cross-CPU call installs it), closed by the helper after the thread ends: pyigprof's "
     "scheme, the floor under it"),
    ("event-wait", "event-wait", {}, "the same, the thread waiting until its event is open"),
    ("event-inherit", "event-inherit", {}, "one task-clock event on the main thread with `inherit`, "
     "`inherit_thread`, `sigtrap` and `remove_on_exec` (Linux 5.13+), which the kernel copies into "
     "each new thread inside `clone` and whose overflow sends SIGTRAP to the overflowing thread: "
     "no descriptor, no cross-CPU call, nothing done per thread by anyone"),
    ("pyigprof", "none", {"PYIGPROF_ALL_PROCESSES": "1"}, "the plain program under pyigprof "
     "(`LD_PRELOAD`, defaults: cpu mode, perf events, 250 Hz), helper process included"),
    ("pyigprof timers", "none", {"PYIGPROF_ALL_PROCESSES": "1", "PYIGPROF_PERF_EVENTS": "0"},
     "the same with `PYIGPROF_PERF_EVENTS=0`"),
    ("pyigprof wall", "none", {"PYIGPROF_ALL_PROCESSES": "1", "PYIGPROF_CLOCK": "wall"},
     "the same in wall mode"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--work", type=int, default=20000, help="loop iterations per thread (default 20000)")
    ap.add_argument("--lib", help="libpyigprof.so (default: this checkout's release build)")
    ap.add_argument("--out", help="write the table here as well")
    args = ap.parse_args()
    lib = one_library(args.lib, "bench/floor/threads")
    with tempfile.TemporaryDirectory(prefix="pyigprof-floor-threads-") as tmp:
        exe = os.path.join(tmp, "threads")
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "threads.c"), "-lpthread"], check=True)
        runs = [("plain", "none", {})] + [(n, t, e) for n, t, e, _ in VARIANTS]
        per_thread = {name: {"cpu": [], "wall": []} for name, _, _ in runs}
        for _ in range(args.rounds):
            for name, trigger, extra in runs:
                got = {}
                for threads in (MANY, FEW):
                    env = dict(os.environ)
                    env.pop("LD_PRELOAD", None)
                    if name.startswith("pyigprof"):
                        env.update(LD_PRELOAD=lib, PYIGPROF_OUTPUT=os.path.join(tmp, "p.%p.gz"),
                                   PYIGPROF_QUIET="1", **extra)
                    r = run_once([exe, trigger, str(PERIOD_NS), str(threads), str(args.work)], env, tmp, 120)
                    if not r["ok"]:
                        sys.exit("bench/floor/threads: %s: %s" % (name, r["error"]))
                    got[threads] = r
                per_thread[name]["cpu"].append((got[MANY]["cpu_s"] - got[FEW]["cpu_s"]) / (MANY - FEW))
                per_thread[name]["wall"].append((got[MANY]["wall_s"] - got[FEW]["wall_s"]) / (MANY - FEW))
        plain = per_thread["plain"]
        lines = [
            "- command: `python3 bench/floor/threads.py %s`" % " ".join(sys.argv[1:]),
            machine_line(),
            "- %d rounds; per thread: (2,000 threads − 200 threads) / 1,800; %d loop iterations a thread" % (
                args.rounds, args.work),
            "",
            "| run | CPU µs per thread | wall µs per thread |",
            "|---|---|---|",
            "| plain | %.1f | %.1f |" % (median_interval([x * 1e6 for x in plain["cpu"]])[0],
                                        median_interval([x * 1e6 for x in plain["wall"]])[0]),
        ]
        for name, _, _, _ in VARIANTS:
            cells = []
            for key in ("cpu", "wall"):
                m, lo, hi = median_interval([(a - b) * 1e6 for a, b in zip(per_thread[name][key], plain[key])])
                cells.append("%+.1f [%+.1f, %+.1f]" % (m, lo, hi))
            lines.append("| %s | %s | %s |" % (name, cells[0], cells[1]))
        lines += ["", "Against plain, median [95 % interval]. Runs:", ""]
        lines += ["- `%s`: %s" % (n, d) for n, _, _, d in VARIANTS]
        print("\n".join(lines))
        if args.out:
            with open(args.out, "w") as f:
                f.write("# Thread start and end: the floor and pyigprof\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
