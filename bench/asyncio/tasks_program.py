"""The asyncio benchmark's program: 40 named `mid-N` tasks each gather 5 named `leaf-N-M`
tasks (200 leaves), each leaf runs LOOPS steps of a little Python work then yields to
the loop (`await asyncio.sleep(0)`): every step is a task switch, every sample of the
loop's thread is inside a task's await chain three tasks deep, and at any moment ~240
tasks are suspended (the wall sampler's worst case: its list walk and its 16 stacks per
pass). `python tasks_program.py LOOPS`."""
import asyncio
import sys

LOOPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


async def leaf():
    for _ in range(LOOPS):
        work(300)
        await asyncio.sleep(0)


async def mid(i):
    await asyncio.gather(*(asyncio.create_task(leaf(), name="leaf-%d-%d" % (i, j))
                           for j in range(5)))


async def main():
    await asyncio.gather(*(asyncio.create_task(mid(i), name="mid-%d" % i) for i in range(40)))


asyncio.run(main())
