"""Three busy Python threads and one thread hashing in OpenSSL with the GIL released.

Each thread measures its own CPU time (time.thread_time(), or getrusage(RUSAGE_THREAD)
on 2.7); the program prints them and the process CPU time as JSON on its last line, so a
profile can be checked against it.

    python3 examples/threads.py [ITERATIONS]
"""
import hashlib
import json
import sys
import threading
import time

spent = {}
try:
    range = xrange  # 2.7: no list of n numbers
except NameError:
    pass


# time.thread_time() is 3.7+; 3.6 has the same clock through clock_gettime; 2.7 has neither,
# but its getrusage passes RUSAGE_THREAD (1, Linux) through.
if hasattr(time, "thread_time"):
    thread_time, process_time = time.thread_time, time.process_time
elif hasattr(time, "clock_gettime"):
    thread_time = lambda: time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    process_time = time.process_time
else:
    import resource

    def rusage_time(who):
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    thread_time = lambda: rusage_time(1)
    process_time = lambda: rusage_time(resource.RUSAGE_SELF)


def spin(n):
    t = 0
    for i in range(n):
        t += i % 7
    return t


def measured(name, work):
    def run():
        start = thread_time()
        work()
        spent[name] = thread_time() - start
    run.__name__ = name
    return run


def worker_a(n):
    spin(n)


def worker_b(n):
    spin(n)


def worker_c(n):
    spin(n)


def hasher(n):
    data = b"x" * (1 << 20)
    for _ in range(n // 40000):
        hashlib.sha256(data).digest()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 12000000
    threads = [
        threading.Thread(target=measured(f.__name__, lambda f=f: f(n)))
        for f in (worker_a, worker_b, worker_c, hasher)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spent["process_cpu_s"] = process_time()
    print(json.dumps(spent))


if __name__ == "__main__":
    main()
