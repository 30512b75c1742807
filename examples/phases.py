"""A loop that repeats with a fixed period: 75 % of each period in phase_a, 25 % in
phase_b, measured by the program itself.

    python3 examples/phases.py PERIOD_S DURATION_S [cpu|pure|wall] [THREADS]

`cpu` (the default): both phases spin on the CPU, timed with time.thread_time() (a system
call, so a third of the time is the kernel's). `pure`: both spin on the CPU timed with
time.perf_counter() (the vDSO: no system call; on an otherwise idle machine the wall time
of a spinning thread is its CPU time). `wall`: both block in time.sleep, timed with
time.perf_counter(). THREADS (default 1) threads run
the loop at once. Prints {"a": seconds in phase_a, "b": seconds in phase_b}, summed over
the threads, and "process": the process's CPU time at the end (its whole profile's). A
profiler whose samples come at fixed instants can see such a loop at one
phase every time (bench/aliasing, tests/perf_events.rs).
"""
import json, sys, threading, time

def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

period, duration = float(sys.argv[1]), float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "cpu"
threads = int(sys.argv[4]) if len(sys.argv) > 4 else 1
def spin_pure(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

wait, clock = {"cpu": (spin, time.thread_time), "pure": (spin_pure, time.perf_counter),
               "wall": (time.sleep, time.perf_counter)}[mode]

def phase_a(seconds):
    wait(seconds)

def phase_b(seconds):
    wait(seconds)

def loop(out):
    a = b = 0.0
    start = clock()
    while clock() - start < duration:
        t0 = clock()
        phase_a(0.75 * period)
        t1 = clock()
        phase_b(0.25 * period)
        t2 = clock()
        a += t1 - t0
        b += t2 - t1
    out.append((a, b))

out = []
if threads == 1:
    loop(out)
else:
    workers = [threading.Thread(target=loop, args=(out,)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
print(json.dumps({"a": sum(x[0] for x in out), "b": sum(x[1] for x in out),
                  "process": time.process_time()}))
