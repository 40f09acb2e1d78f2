"""An ``async def`` job function, and awaiting job handles from asyncio code.

A coroutine function runs on an event loop that the worker owns (its own thread), under the
same concurrency limit as a thread worker: here 5 jobs at a time, each awaiting
``asyncio.sleep``. The caller's own ``asyncio.run`` loop adds jobs and ``await``-s their
handles, which never blocks the caller's loop: a ticker task keeps running meanwhile.

Run it with::

    python examples/async_worker.py
"""

from __future__ import annotations

import asyncio
import time

import varmq


async def fetch(job: varmq.Job[str]) -> int:
    await asyncio.sleep(0.2)  # stands in for a network call
    if job.data.endswith(".invalid"):
        raise ConnectionError(f"cannot resolve {job.data}")
    return len(job.data)


async def ticker(stop: asyncio.Event) -> int:
    ticks = 0
    while not stop.is_set():
        await asyncio.sleep(0.05)
        ticks += 1
    return ticks


async def main() -> None:
    worker = varmq.new_result_worker(fetch, 5)
    queue = worker.bind_queue()
    stop = asyncio.Event()
    ticking = asyncio.create_task(ticker(stop))

    start = time.perf_counter()
    hosts = ["a.example", "bb.example", "python.org", "docs.python.org", "example.com"] * 2
    jobs = [queue.add(host) for host in hosts]
    lengths = await asyncio.gather(*(job for job in jobs if job is not None))
    elapsed = time.perf_counter() - start
    print(f"10 jobs of 0.2 s each at concurrency 5 took {elapsed:.2f} s; results: {lengths}")

    broken = queue.add("nowhere.invalid")
    assert broken is not None
    try:
        await broken  # a result handle raises the job's exception when awaited
    except ConnectionError as exc:
        print(f"awaiting the failed job raised: {exc}")

    group = queue.add_all(["a.example.com", "b.example.com"])
    await group  # a group handle can be awaited too
    print(f"group done, pending={group.num_pending()}")

    stop.set()
    print(f"the caller's loop kept ticking meanwhile: {await ticking} ticks")

    # stop_and_wait blocks; from asyncio code, run it in a thread.
    await asyncio.to_thread(worker.stop_and_wait)
    print(f"worker is {worker.status}, metrics: {worker.metrics}")


if __name__ == "__main__":
    asyncio.run(main())
