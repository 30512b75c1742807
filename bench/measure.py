"""Running one benchmark process, shared by bench/overhead, bench/memory and bench/startup:
the CPU time and peak RSS of a command and every descendant it waited for (wait4), plus
the CPU time of every process it left behind (orphans), with a timeout.

Orphans matter: pyigprof's helper process is a `CLONE_VM` clone without an exit signal,
not a child the program waits for, so the program's `wait4` rusage leaves it out. This
process makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`): a descendant whose
parent ends is re-parented here, and reaped here with `wait4(-1, __WALL)`, whose rusage
then counts it. The helper process ends with the program (`PR_SET_PDEATHSIG`), so its
whole CPU time, start-up to exit, is in `orphan_cpu_s` and in `cpu_s`."""

import ctypes
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time


PR_SET_CHILD_SUBREAPER = 36
WALL = 0x40000000  # __WALL: also children without an exit signal (<linux/wait.h>)
_SUBREAPER = []


def become_subreaper():
    """Makes this process the reaper of its descendants' orphans (once)."""
    if not _SUBREAPER:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        _SUBREAPER.append(True)


def reap_orphans(wait_s=2.0):
    """Reaps the processes re-parented here since the last call, waiting up to wait_s for
    those still running to end (pyigprof's helper process is killed when the program's
    main thread ends, a few milliseconds later at most). Returns their CPU time, s, and
    their number."""
    cpu, count = 0.0, 0
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _, ru = os.wait4(-1, WALL | os.WNOHANG)
        except ChildProcessError:
            return cpu, count
        if pid == 0:
            if time.monotonic() > deadline:
                return cpu, count
            time.sleep(0.001)
            continue
        cpu += ru.ru_utime + ru.ru_stime
        count += 1


def run_once(argv, env, rundir, timeout_s):
    """Runs argv to completion (killed, with its process group, after timeout_s) and
    returns cpu_s (the process, every descendant it waited for, from wait4, and every
    orphan it left, reaped here: `reap_orphans`), program_cpu_s (without the orphans),
    orphan_cpu_s, user_s, sys_s (wait4's), maxrss_kib, wall_s, status, stderr, and ok or
    error."""
    become_subreaper()
    reap_orphans(0)
    err_path = os.path.join(rundir, "stderr.txt")
    with open(err_path, "wb") as err:
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, env=env, cwd=rundir, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        except OSError as e:
            return {"ok": False, "error": "cannot start %s: %s" % (argv[0], e)}
        timed_out = []

        def kill():
            timed_out.append(True)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        except BaseException:
            kill()
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") \
            else (-(status & 0x7f) if status & 0x7f else status >> 8)
    with open(err_path, "rb") as f:
        stderr = f.read().decode("utf-8", "replace")
    orphan_cpu, _ = reap_orphans()
    program_cpu = ru.ru_utime + ru.ru_stime
    res = {"cpu_s": program_cpu + orphan_cpu, "program_cpu_s": program_cpu,
           "orphan_cpu_s": orphan_cpu, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "maxrss_kib": ru.ru_maxrss, "wall_s": wall, "status": code, "stderr": stderr}
    if timed_out:
        res.update(ok=False, error="timed out after %g s" % timeout_s)
    elif code != 0:
        lines = [l for l in stderr.splitlines() if l.strip()]
        res.update(ok=False, error="exit status %d: %s" % (code, (lines[-1] if lines else "")[:160]))
    else:
        res["ok"] = True
    return res


def build_floor_shim(directory):
    """Builds bench/floor/shim.c (every thread's own sampling trigger and an empty handler,
    nothing else: the floor under pyigprof's scheme) into `directory`; returns its path.
    Needs `cc`; raises CalledProcessError when the build fails."""
    shim = os.path.join(directory, "shim.so")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor", "shim.c")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", shim, source, "-ldl", "-lpthread"],
                   check=True)
    return shim


def median_interval(values):
    """Median of `values` and a 95 % interval for it from order statistics (the
    binomial(n, 1/2) quantiles), distribution-free."""
    xs = sorted(values)
    n = len(xs)
    k = max(0, int(math.floor(n / 2 - 1.96 * math.sqrt(n) / 2)))
    return statistics.median(xs), xs[k], xs[min(n - 1, n - 1 - k)]


def add_lib_option(parser):
    """Adds the `--lib NAME=PATH` option (repeatable) that [`libraries`] reads."""
    parser.add_argument("--lib", action="append", default=[],
                        help="NAME=PATH of a libpyigprof.so to measure (repeatable); "
                             "default: this checkout's release build")


def libraries(specs, tool):
    """The `--lib NAME=PATH` values `specs` as `(name, absolute path)` pairs; exits with a
    message naming `tool` and the value when one is not NAME=PATH of an existing file."""
    libs = []
    for spec in specs:
        name, _, path = spec.partition("=")
        if not path or not os.path.exists(path):
            sys.exit("%s: --lib %r: expected NAME=PATH of an existing file" % (tool, spec))
        libs.append((name, os.path.abspath(path)))
    return libs


def machine_line():
    """One markdown list item saying when and where a benchmark ran: date, host, CPUs,
    kernel and the load average before it (results files keep it with the table)."""
    import datetime
    import platform
    return "- date: %s; host: %s, %d CPUs, kernel %s; load average before: %s" % (
        datetime.datetime.now().isoformat(timespec="seconds"), platform.node(), os.cpu_count(),
        platform.release(), " ".join("%.2f" % x for x in os.getloadavg()))


def one_library(path, tool):
    """The `libpyigprof.so` a benchmark that measures one build runs: `path` (its `--lib`)
    or this checkout's release build; exits with a message naming `tool` when it is
    missing."""
    lib = path or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "target", "release", "libpyigprof.so")
    if not os.path.exists(lib):
        sys.exit("%s: no %s (cargo build --release, or --lib)" % (tool, lib))
    return os.path.abspath(lib)
