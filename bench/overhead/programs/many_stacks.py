"""Many distinct, deep call stacks: 3,000 generated functions called in random chains
of depth 1-24, so that the samples rarely repeat a stack and the trace tree keeps
growing (issue 39: the profiler's cost per sample must not grow with the stacks it
holds). The chains are fixed by a seeded generator: every run does the same work.

Usage: python many_stacks.py LOOPS    (one loop is a fixed unit of work)
"""
import random
import sys

FUNCTIONS = 3000
CHAINS = 4000


def make_functions():
    """f0 ... f2999: each does a little arithmetic and calls the next function of its
    chain (or returns at the chain's end)."""
    source = []
    for i in range(FUNCTIONS):
        source.append(
            "def f%d(chain, depth):\n"
            "    x = 0\n"
            "    for k in range(12):\n"
            "        x += k * %d\n"
            "    if depth + 1 < len(chain):\n"
            "        x += FUNCS[chain[depth + 1]](chain, depth + 1)\n"
            "    return x\n" % (i, i % 7 + 1))
    namespace = {}
    exec(compile("\n".join(source), "many_stacks_generated", "exec"), namespace)
    funcs = [namespace["f%d" % i] for i in range(FUNCTIONS)]
    namespace["FUNCS"] = funcs
    return funcs


def main(loops):
    funcs = make_functions()
    rng = random.Random(39)
    chains = [[rng.randrange(FUNCTIONS) for _ in range(rng.randint(1, 24))]
              for _ in range(CHAINS)]
    total = 0
    for _ in range(loops):
        for chain in chains:
            total += funcs[chain[0]](chain, 0)
    return total


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
