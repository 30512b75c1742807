"""Stacks of varying depth, for the handler's cost per frame.

Two phases, each on every depth from 2 to 120 in turn:
- Python recursion over a pure-Python leaf: the Python frame count varies (on CPython
  3.11+ the native frame count stays the same: nested Python calls share one evaluator
  frame).
- json.dumps of lists nested DEPTH deep: the C encoder recurses natively (a few native
  frames per level) under a fixed Python stack.
pyigprof's handler statistics (`#pyigprof handler ... native_frame_ns= python_frame_ns=`)
fit the time per sample against the two counts.

Usage: python stack_depths.py LOOPS    (one loop is a fixed unit of work)
"""
import json
import sys

DEPTHS = range(2, 121, 6)


def leaf():
    t = 0
    for i in range(2000):
        t += i % 7
    return t


def down(n):
    return leaf() if n == 0 else down(n - 1)


def nested(depth):
    value = [1, 2, 3]
    for _ in range(depth):
        value = [value, "x" * 20, 4.5]
    return value


def main(loops):
    documents = {d: nested(d) for d in DEPTHS}
    for _ in range(loops):
        for depth in DEPTHS:
            down(depth)
            for _ in range(15):
                json.dumps(documents[depth])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
