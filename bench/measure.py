"""Running one benchmark process, shared by bench/overhead and bench/memory: the CPU time
and peak RSS of a command and every descendant it waited for (wait4), with a timeout."""

import os
import signal
import subprocess
import threading
import time


def run_once(argv, env, rundir, timeout_s):
    """Runs argv to completion (killed, with its process group, after timeout_s) and
    returns cpu_s, user_s, sys_s (of the process and every descendant it waited for, from
    wait4), maxrss_kib, wall_s, status, stderr, and ok or error."""
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
    res = {"cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "maxrss_kib": ru.ru_maxrss, "wall_s": wall, "status": code, "stderr": stderr}
    if timed_out:
        res.update(ok=False, error="timed out after %g s" % timeout_s)
    elif code != 0:
        lines = [l for l in stderr.splitlines() if l.strip()]
        res.update(ok=False, error="exit status %d: %s" % (code, (lines[-1] if lines else "")[:160]))
    else:
        res["ok"] = True
    return res
