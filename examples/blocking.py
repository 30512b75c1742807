"""Half computing, half waiting: what PYIGPROF_CLOCK=cpu and =wall each show.

compute() spins for about a second of CPU time; wait_for_io() sleeps for a second (a
stand-in for a blocking read, a lock or a remote call). A CPU profile shows only compute();
a wall-clock profile shows both, about half each.

    python3 examples/blocking.py
"""

import time


def compute(seconds):
    end = time.time() + seconds
    t = 0
    while time.time() < end:
        t += 1
    return t


def wait_for_io(seconds):
    time.sleep(seconds)


def main():
    compute(1.0)
    wait_for_io(1.0)


if __name__ == "__main__":
    main()
