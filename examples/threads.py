"""Three busy Python threads and one thread hashing in OpenSSL with the GIL released.

Each thread measures its own CPU time (time.thread_time(); Python 3.6+); the program
prints them and the process CPU time as JSON on its last line, so a profile can be
checked against it.

    python3 examples/threads.py [ITERATIONS]
"""
import hashlib
import json
import sys
import threading
import time

spent = {}
# time.thread_time() is 3.7+; 3.6 has the same clock through clock_gettime.
thread_time = getattr(time, "thread_time", None) or (
    lambda: time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
)


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
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 12_000_000
    threads = [
        threading.Thread(target=measured(f.__name__, lambda f=f: f(n)))
        for f in (worker_a, worker_b, worker_c, hasher)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"process_cpu_s": time.process_time(), **spent}))


if __name__ == "__main__":
    main()
