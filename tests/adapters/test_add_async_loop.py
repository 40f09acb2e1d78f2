"""The event loop keeps ticking while ``add_async`` stores jobs in sqliteq and redisq.

A ticker task asks to wake every 5 ms and records how late each wake-up is, while 2,000
``add_async`` calls (100 in flight at a time, as a busy web service would make them) store
jobs in a real SQLite file and on the session's real redis-server. The blocking ``add`` called
from a coroutine is the contrast: it holds the loop for the whole burst.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import redisq
import sqliteq
import varmq

# Run alone by the test command:
# a timing probe: alone, or another test's load is what it measures.
pytestmark = pytest.mark.serial

ADDS = 2_000
IN_FLIGHT = 100
TICK = 0.005
MAX_LAG = 0.050


@pytest.fixture(params=["sqliteq", "redisq"])
def handle(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqliteq":
        store: Any = sqliteq.new(str(tmp_path / "jobs.db"))
    else:
        store = redisq.new(request.getfixturevalue("redis_db"))
    try:
        yield varmq.new_distributed_queue(store.new_distributed_queue("stall-probe"))
    finally:
        store.close()


async def _max_lag_while(burst: Callable[[], Awaitable[None]]) -> float:
    """The latest a 5 ms ticker woke up (seconds past its due time) while ``burst`` ran."""
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            due = time.perf_counter() + TICK
            await asyncio.sleep(TICK)
            lags.append(time.perf_counter() - due)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is waiting before the burst starts
    try:
        await burst()
    finally:
        done.set()
        await ticking
    return max(lags)


def test_add_async_never_holds_the_loop_for_long(handle: Any) -> None:
    async def burst() -> None:
        for first in range(IN_FLIGHT, ADDS, IN_FLIGHT):
            added = await asyncio.gather(
                *(handle.add_async(n, job_id=f"a-{n}") for n in range(first, first + IN_FLIGHT))
            )
            assert all(added)

    async def probe() -> float:
        # The first calls start the producer threads and the connections: not the steady
        # state a service lives in, so they are made before the ticker starts.
        await asyncio.gather(*(handle.add_async(n, job_id=f"a-{n}") for n in range(IN_FLIGHT)))
        return await _max_lag_while(burst)

    # A full collection of the test process's heap (thousands of tests' objects) can hold every
    # thread for a tenth of a second: the interpreter's pause, not the adds'. Frozen, the objects
    # made before the probe are left out of the collections during it.
    gc.collect()
    gc.freeze()
    try:
        lag = asyncio.run(probe())
    finally:
        gc.unfreeze()
    assert len(handle) == ADDS
    assert lag < MAX_LAG, f"the loop stalled {lag * 1000:.1f} ms during add_async"


def test_the_blocking_add_stalls_the_loop(handle: Any) -> None:
    async def burst() -> None:
        for n in range(ADDS):  # all of them: one blocking add is quick, a burst is not
            assert handle.add(n, job_id=f"b-{n}")

    lag = asyncio.run(_max_lag_while(burst))
    assert lag >= MAX_LAG, f"blocking adds held the loop only {lag * 1000:.1f} ms"
