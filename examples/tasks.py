"""An asyncio program for task stacks (CPython 3.14+): two handler tasks, each gathering
two named fetch tasks that burn CPU in `query` between sleeps, then burning CPU of its own.

    pyigprof record -r 1000 -- python3.14 examples/tasks.py
    pyigprof-analyse pyigprof.*.gz --tree          # <task …> frames over each coroutine

With --clock wall, each suspended task's await time is under its own await chain too."""
import asyncio
import time


def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def query(seconds):
    burn(seconds)
    await asyncio.sleep(0.01)


async def fetch_user():
    for _ in range(20):
        await query(0.005)


async def fetch_orders():
    for _ in range(20):
        await query(0.015)


async def handler(n):
    await asyncio.gather(
        asyncio.create_task(fetch_user(), name="fetch_user-%d" % n),
        asyncio.create_task(fetch_orders(), name="fetch_orders-%d" % n),
    )
    burn(0.1)


async def main():
    async with asyncio.TaskGroup() as group:
        for n in (1, 2):
            group.create_task(handler(n), name="handler-%d" % n)


asyncio.run(main())
