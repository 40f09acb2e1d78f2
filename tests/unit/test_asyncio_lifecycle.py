"""asyncio all the way: async waits and lifecycle that never block the loop, jobs on the
application's own loop, and awaitable handles that park no thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import pytest

import varmq

WAIT = 5.0


async def _max_lag_while(awaitable: Any, period: float = 0.005) -> tuple[Any, float]:
    """Run ``awaitable`` while a ticker measures how late the loop runs it: (result, max lag)."""
    lag = 0.0
    done = False

    async def ticker() -> None:
        nonlocal lag
        while not done:
            planned = time.monotonic() + period
            await asyncio.sleep(period)
            lag = max(lag, time.monotonic() - planned)

    task = asyncio.ensure_future(ticker())
    try:
        result = await awaitable
    finally:
        done = True
        await task
    return result, lag


def test_async_waits_do_not_block_the_loop() -> None:
    release = threading.Event()

    async def main() -> None:
        worker = varmq.new_worker(lambda job: release.wait(WAIT), 2)
        worker.bind_queue().add(1)
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, release.set)
        drained, lag = await _max_lag_while(worker.wait_async(WAIT))
        assert drained
        assert lag < 0.1, f"the loop was blocked for {lag:.3f} s"
        assert await worker.wait_until_idle_async(WAIT)
        stopped, lag = await _max_lag_while(worker.stop_async(WAIT))
        assert stopped and worker.is_stopped
        assert lag < 0.1

    asyncio.run(main())


def test_async_with_drains_then_stops_the_worker() -> None:
    ran: list[int] = []

    async def main() -> None:
        async with varmq.new_worker(lambda job: ran.append(job.data), 2) as worker:
            queue = worker.bind_queue()
            for n in range(20):
                queue.add(n)
        assert worker.is_stopped

    asyncio.run(main())
    assert sorted(ran) == list(range(20))


def test_an_async_wait_times_out_without_blocking() -> None:
    release = threading.Event()

    async def main() -> None:
        worker = varmq.new_worker(lambda job: release.wait(WAIT))
        worker.bind_queue().add(1)
        assert await worker.wait_async(timeout=0.1) is False
        release.set()
        assert await worker.stop_async(WAIT)

    asyncio.run(main())


def test_serve_runs_async_jobs_on_the_callers_loop_with_its_clients() -> None:
    class LoopBoundClient:
        """Like an httpx.AsyncClient: usable only on the loop that created it."""

        def __init__(self) -> None:
            self.loop = asyncio.get_running_loop()

        async def get(self, n: int) -> int:
            if asyncio.get_running_loop() is not self.loop:
                raise RuntimeError("attached to a different loop")
            await asyncio.sleep(0)
            return n * 2

    async def main() -> list[Any]:
        client = LoopBoundClient()

        async def job_fn(job: varmq.Job[int]) -> int:
            return await client.get(job.data)

        worker = varmq.new_result_worker(job_fn, 4, auto_run=False)
        serving = asyncio.ensure_future(worker.serve())
        queue = worker.bind_queue()
        handles = [queue.add(n) for n in range(10)]
        results = [await job for job in handles if job is not None]
        assert await worker.stop_async(WAIT)
        await serving
        return results

    assert asyncio.run(main()) == [n * 2 for n in range(10)]


def test_serve_refuses_a_worker_already_running_its_own_loop() -> None:
    async def job_fn(job: varmq.Job[Any]) -> None:
        return None

    async def main() -> None:
        worker = varmq.new_worker(job_fn)
        with pytest.raises(varmq.RunningWorkerError, match="auto_run=False"):
            await worker.serve()
        assert await worker.stop_async(WAIT)

    asyncio.run(main())


def test_await_group_completes_with_the_default_executor_limited_to_one_thread() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        worker = varmq.new_result_worker(lambda job: job.data, 4)
        group = worker.bind_queue().add_all(range(1000))
        await asyncio.wait_for(group, WAIT)  # type: ignore[arg-type]
        total = 0
        async for result in group.results_async():
            total += result.data or 0
        assert await worker.stop_async(WAIT)
        return total

    assert asyncio.run(main()) == sum(range(1000))


def test_results_async_streams_outcomes_as_members_finish() -> None:
    gates = {n: threading.Event() for n in range(3)}

    def run(job: varmq.Job[int]) -> int:
        gates[job.data].wait(WAIT)
        return job.data

    async def main() -> list[int]:
        worker = varmq.new_result_worker(run, 3)
        group = worker.bind_queue().add_all([0, 1, 2])
        seen: list[int] = []
        for n in (2, 0, 1):
            gates[n].set()
            result = await asyncio.wait_for(group.results_async().__anext__(), WAIT)
            seen.append(result.data)
        assert await worker.stop_async(WAIT)
        return seen

    assert asyncio.run(main()) == [2, 0, 1]


def test_a_blocking_wait_from_a_workers_own_job_raises_instead_of_hanging() -> None:
    seen: list[BaseException] = []

    def run(job: varmq.Job[Any]) -> None:
        try:
            worker.wait(timeout=1.0)
        except RuntimeError as exc:
            seen.append(exc)

    worker = varmq.new_worker(run, log_failures=False)
    job = worker.bind_queue().add(1)
    assert job is not None and job.wait(WAIT)
    [error] = seen
    assert "would wait for itself" in str(error)


def test_a_blocking_job_wait_on_the_workers_loop_raises_instead_of_stopping_it() -> None:
    gate = threading.Event()
    worker = varmq.new_worker(lambda job: gate.wait(WAIT))
    other = worker.bind_queue().add(0)  # not finished while the gate is shut
    assert other is not None

    async def outer(job: varmq.Job[Any]) -> str:
        try:
            other.wait(WAIT)
        except RuntimeError as exc:
            return str(exc)
        return "blocked the loop"

    caller = varmq.new_result_worker(outer)
    job = caller.bind_queue().add(0)
    assert job is not None
    assert "use 'await job'" in job.result(WAIT)
    gate.set()
    assert caller.stop_and_wait(WAIT) and worker.stop_and_wait(WAIT)


def test_add_async_on_a_storage_without_async_calls_does_not_stall_the_loop() -> None:
    from varmq.testing import MemoryStorage

    storage = MemoryStorage()
    slow = storage.new_distributed_queue("jobs")
    enqueue = slow.enqueue

    def slow_enqueue(item: Any) -> bool:
        time.sleep(0.02)  # a storage round trip under load, simulated
        return enqueue(item)

    slow.enqueue = slow_enqueue  # type: ignore[method-assign]

    async def main() -> None:
        producer = varmq.new_distributed_queue(slow)
        adds = asyncio.gather(*(producer.add_async({"n": n}) for n in range(40)))
        results, lag = await _max_lag_while(adds)
        assert results == [True] * 40
        assert lag < 0.05, f"the loop was late by {lag:.3f} s"
        assert await producer.len_async() == 40

    asyncio.run(main())


def test_add_async_works_on_every_queue_kind_and_checks_like_add() -> None:
    from varmq.testing import MemoryStorage

    storage = MemoryStorage()

    async def main() -> None:
        worker = varmq.new_result_worker(lambda job: job.data, auto_run=False)
        memory = worker.bind_priority_queue()
        job = await memory.add_async(3, 1)
        assert job is not None
        stored = varmq.new_worker(lambda job: None, auto_run=False).with_persistent_queue(
            storage.new_queue("p")
        )
        assert await stored.add_async({"a": 1}, job_id="x") is True
        assert await stored.add_async({"a": 1}, job_id="x") is True  # deduplicated
        assert await stored.len_async() == 1
        with pytest.raises(TypeError, match="queue 'p': job 'y'"):
            await stored.add_async({1, 2}, job_id="y")
        assert await stored.dead_letters_async() == []
        worker.start()
        assert await job == 3
        assert await worker.stop_async(WAIT)

    asyncio.run(main())
