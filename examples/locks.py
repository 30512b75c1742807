"""Four threads contending for one lock, each holding it ~1 ms, 150 times; the main thread
joins them. For the lock profiler: PYIGPROF_PROFILE=lock (README, "The lock profiler")."""
import threading
import time

lock = threading.Lock()


def hold_work():
    time.sleep(0.001)


def worker(n):
    for _ in range(n):
        with lock:
            hold_work()


threads = [threading.Thread(target=worker, args=(150,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
