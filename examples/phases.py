"""A loop that repeats with a fixed period: 75 % of each period in phase_a, 25 % in
phase_b, measured by the program itself with time.thread_time().

    python3 examples/phases.py PERIOD_S DURATION_S

Prints {"a": seconds in phase_a, "b": seconds in phase_b}. A profiler whose samples come at
fixed instants can see such a loop at one phase every time (bench/aliasing,
tests/perf_events.rs).
"""
import json, sys, time
def phase_a(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
def phase_b(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
period, duration = float(sys.argv[1]), float(sys.argv[2])
a = b = 0.0
start = time.thread_time()
while time.thread_time() - start < duration:
    t0 = time.thread_time()
    phase_a(0.75 * period)
    t1 = time.thread_time()
    phase_b(0.25 * period)
    t2 = time.thread_time()
    a += t1 - t0
    b += t2 - t1
print(json.dumps({"a": a, "b": b}))
