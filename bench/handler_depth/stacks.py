"""bench/handler_depth's program: call stacks of a chosen depth and variety. DISTINCT
chains of DEPTH Python calls each, through a pool of 64 generated functions, the function
at each level chosen by a hash of (chain, level), so that the chains differ all along;
each leaf loops 200 + 8 x DEPTH additions (most of the time, at every depth). Runs for
SECONDS of CPU time and prints the chains it ran.

Usage: python stacks.py DEPTH DISTINCT SECONDS"""
import sys, time

DEPTH, DISTINCT, SECONDS = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
sys.setrecursionlimit(DEPTH + 1000)
POOL = 64
source = []
for i in range(POOL):
    source.append(
        "def g%d(chain, level):\n"
        "    if level < DEPTH:\n"
        "        return FUNCS[(chain * 2654435761 + level * 40503) %% POOL](chain, level + 1)\n"
        "    x = 0\n"
        "    for k in range(LEAF):\n"
        "        x += k\n"
        "    return x\n" % i)
namespace = {"DEPTH": DEPTH, "POOL": POOL, "LEAF": 200 + 8 * DEPTH}
exec(compile("\n".join(source), "stacks_generated", "exec"), namespace)
FUNCS = [namespace["g%d" % i] for i in range(POOL)]
namespace["FUNCS"] = FUNCS
end = time.process_time() + SECONDS
calls = 0
chain = 0
while time.process_time() < end:
    for _ in range(50):
        FUNCS[chain % POOL](chain, 1)
        chain = (chain + 1) % DISTINCT
        calls += 1
print(calls)
