"""A worker on a queue with a ``rate_limit``: it starts no more jobs than the window allows,
uses the limit, and waits for the window to open instead of taking again and again (the
storage semantics are in the conformance suite, varmq/testing/conformance_rates.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import varmq
from tests.support.windows import most_in_any_window
from varmq.testing import MemoryStorage

WAIT = 10.0
SLACK = 0.1
"""Seconds between a start's take and its function's first line that a loaded machine may add."""


def test_a_worker_keeps_to_the_window_and_sleeps_until_it_opens() -> None:
    storage = MemoryStorage()  # the real monotonic clock
    queue = storage.new_distributed_queue("limited", rate_limit=(4, 0.25))
    takes = 0
    take = queue.dequeue_batch_with_attempts

    def counted_take(n: int) -> Any:
        nonlocal takes
        takes += 1
        return take(n)

    queue.dequeue_batch_with_attempts = counted_take  # type: ignore[method-assign]
    starts: list[float] = []
    done = threading.Semaphore(0)

    def run(job: varmq.Job[int]) -> None:
        starts.append(time.monotonic())
        done.release()

    worker = varmq.new_worker(run, concurrency=4)
    handle = worker.with_distributed_queue(queue)
    try:
        for i in range(20):
            assert handle.add(i)
        for _ in range(20):
            assert done.acquire(timeout=WAIT)
    finally:
        worker.stop()
    # Never more than 4 in any 0.25 s. The store counts a start at its take and the function
    # logs it when its thread runs it, up to a scheduling delay later on a busy machine (the
    # parallel pass runs four test processes on two cores): windows 0.1 s shorter are checked
    # here; the conformance suite checks the window exactly, on a fake clock.
    assert most_in_any_window(starts, 0.25 - SLACK) <= 4
    # The limit is used: 20 jobs at 4 per 0.25 s take about 1 s, not much more.
    assert starts[-1] - starts[0] < 1.0 + 1.0
    # Asleep while the window is full, not polling: about one take per window.
    assert takes <= 5 * 4, takes


def test_a_storage_queue_without_the_protocol_or_a_limit_is_not_throttled() -> None:
    storage = MemoryStorage()
    queue = storage.new_queue("plain")
    ran = threading.Semaphore(0)
    worker = varmq.new_worker(lambda job: ran.release(), concurrency=2)
    handle = worker.with_persistent_queue(queue)
    for i in range(50):
        handle.add(i)
    try:
        for _ in range(50):
            assert ran.acquire(timeout=WAIT)
    finally:
        worker.stop()


@pytest.mark.parametrize("bad", ["fast", (0, 1), "5/s/s"])
def test_a_bad_rate_limit_on_an_adapter_queue_names_it(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="rate_limit="):
        MemoryStorage().new_queue("q", rate_limit=bad)


@pytest.mark.parametrize("prioritised", [False, True])
def test_an_in_memory_queue_keeps_to_its_window_too(prioritised: bool) -> None:
    starts: list[float] = []
    done = threading.Semaphore(0)

    def run(job: varmq.Job[int]) -> None:
        starts.append(time.monotonic())
        done.release()

    worker = varmq.new_worker(run, concurrency=4)
    if prioritised:
        queue: Any = worker.bind_priority_queue(rate_limit=(4, 0.25))
    else:
        queue = worker.bind_queue(rate_limit="4/0.25s")
    try:
        for i in range(20):
            assert queue.add(i) is not None
        for _ in range(20):
            assert done.acquire(timeout=WAIT)
        [row] = worker.queue_stats()
        assert row["rate_window_used"] <= 4
    finally:
        worker.stop()
    assert most_in_any_window(starts, 0.25 - SLACK) <= 4
    assert starts[-1] - starts[0] < 1.0 + 1.0


def test_a_bad_rate_limit_on_an_in_memory_queue_names_it() -> None:
    worker = varmq.new_worker(lambda job: None)
    with pytest.raises(ValueError, match=r"rate_limit='7 per second'"):
        worker.bind_queue(rate_limit="7 per second")
