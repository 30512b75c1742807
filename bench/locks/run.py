#!/usr/bin/env python3
"""Lock-profiler cost benchmark: what `PYIGPROF_PROFILE=lock` adds to programs that take
locks, against the same program without the preload and with the default CPU profile.

    python3 bench/locks/run.py [--rounds 10] [--python PATH ...] [--out FILE.md]

Programs (written to a temporary directory):
- `with_lock`: 10 M uncontended `with lock:` on one thread (issue 56's cost figure): on
  3.7–3.13.0 each acquire and release is a `sem_trywait` and a `sem_post`, which the lock
  profiler times (a hold each); 3.13.1+'s `PyMutex` makes no call;
- `contended`: examples/locks.py (four threads, one lock held ~1 ms, 150 times each);
- `mutex_loop`: a C program taking and releasing a `pthread_mutex_t` 20 M times on one
  thread (every C/C++ library's mutexes go through the hooks; profiled with
  `PYIGPROF_ALL_PROCESSES=1`, as a non-Python program is only on request).

Modes, alternated round by round (paired): `plain` (no preload), `cpu` (the preload's
default: the lock hooks pass through), `lock` (`PYIGPROF_PROFILE=lock`), `cpu,lock`.
The cost counts the program's CPU and the helper process's (bench/measure.py: reaped as
an orphan), start-up and exit included. Prints the medians and the per-round paired
ratios to `plain` (median and its 95 % interval from order statistics).

Standard library only.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from measure import median_interval, run_once  # noqa: E402  (bench/measure.py)

LIBRARY = os.path.join(REPO, "target", "release", "libpyigprof.so")
WITH_LOCK = """
import threading
lock = threading.Lock()
for _ in range(10_000_000):
    with lock:
        pass
"""
MUTEX_LOOP = r"""
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
volatile long n;
int main(void) {
    for (long i = 0; i < 20000000; i++) {
        pthread_mutex_lock(&m);
        n++;
        pthread_mutex_unlock(&m);
    }
    return 0;
}
"""
MODES = {
    "plain": None,
    "cpu": {},
    "lock": {"PYIGPROF_PROFILE": "lock"},
    "cpu,lock": {"PYIGPROF_PROFILE": "cpu,lock"},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--python", action="append",
                    default=None, help="interpreters (default: pyenv's 3.12.1)")
    ap.add_argument("--out", help="also write the Markdown table here")
    args = ap.parse_args()
    pythons = args.python or ["/root/.pyenv/versions/3.12.1/bin/python"]
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "pyigprof-preload"], cwd=REPO,
                   check=True)
    work = tempfile.mkdtemp(prefix="pyigprof-bench-locks-")
    with open(os.path.join(work, "with_lock.py"), "w") as f:
        f.write(WITH_LOCK)
    with open(os.path.join(work, "mutex_loop.c"), "w") as f:
        f.write(MUTEX_LOOP)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", os.path.join(work, "mutex_loop"),
                    os.path.join(work, "mutex_loop.c")], check=True)
    programs = []
    for py in pythons:
        tag = os.path.basename(os.path.dirname(os.path.dirname(py))) or py
        programs.append(("with_lock " + tag, [py, os.path.join(work, "with_lock.py")]))
        programs.append(("contended " + tag, [py, os.path.join(REPO, "examples", "locks.py")]))
    programs.append(("mutex_loop", [os.path.join(work, "mutex_loop")]))
    lines = ["| program | mode | CPU s (median) | wall s (median) | CPU ratio to plain, "
             "median [95 %] |", "|---|---|---|---|---|"]
    for name, argv in programs:
        runs = {mode: [] for mode in MODES}
        for r in range(args.rounds):
            order = list(MODES)
            if r % 2:
                order.reverse()
            for mode in order:
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                if MODES[mode] is not None:
                    env["LD_PRELOAD"] = LIBRARY
                    env["PYIGPROF_OUTPUT"] = os.path.join(work, "profile.%p.gz")
                    env.update(MODES[mode])
                    if name == "mutex_loop":
                        env["PYIGPROF_ALL_PROCESSES"] = "1"  # not Python: profiled on request
                res = run_once(argv, env, work, 300)
                if not res["ok"]:
                    sys.exit("%s %s: %s" % (name, mode, res["error"]))
                runs[mode].append(res)
        for mode in MODES:
            cpu = [r["cpu_s"] for r in runs[mode]]
            wall = [r["wall_s"] for r in runs[mode]]
            ratios = [a["cpu_s"] / b["cpu_s"] for a, b in zip(runs[mode], runs["plain"])]
            m, lo, hi = median_interval(ratios)
            lines.append("| %s | %s | %.3f | %.3f | ×%.3f [%.3f–%.3f] |" % (
                name, mode, statistics.median(cpu), statistics.median(wall), m, lo, hi))
        print("\n".join(lines[-len(MODES):]), flush=True)
    table = "\n".join(lines)
    print("\n" + table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
