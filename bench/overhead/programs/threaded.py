"""Threaded workload: three Python threads doing pure-Python work (they take
turns on the GIL) and one thread hashing large buffers with SHA-256, which
releases the GIL, so up to two threads run at once on a 2-core machine.

Usage: python threaded.py LOOPS    (each thread does LOOPS fixed units of work)
"""
import hashlib
import sys
import threading

BUF = bytes(range(256)) * 4096          # 1 MiB: hashlib releases the GIL above 2 KiB


def python_worker(loops, out, k):
    total = 0
    for _ in range(loops):
        d = {}
        for i in range(5000):
            d[i % 97] = d.get(i % 97, 0) + i * k
        total += sum(sorted(d.values(), key=lambda v: -v)[:5])
    out[k] = total


def hashing_worker(loops, out):
    h = hashlib.sha256()
    for _ in range(loops):
        for _ in range(2):
            h.update(BUF)
    out["hash"] = h.hexdigest()


def main(loops):
    out = {}
    threads = [threading.Thread(target=python_worker, args=(loops, out, k)) for k in range(3)]
    threads.append(threading.Thread(target=hashing_worker, args=(loops, out)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]))
