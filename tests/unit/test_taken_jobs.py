"""The record of jobs an in-memory queue handed out and that are not settled yet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import varmq
from tests.unit.conftest import WAIT, Gate
from varmq.sources.taken import TAKING, TakenJobs, Taker


def recorded(handle: Any) -> list[Any]:
    """The handles the queue's record holds that are still running."""
    source = handle._source
    with handle._dispatch.lock, source.taken.frozen() as jobs:
        return [job for job in jobs if job.status is varmq.JobStatus.PROCESSING]


@pytest.mark.parametrize("kind", ["thread", "async"])
@pytest.mark.parametrize("queues", [1, 2], ids=["lock-free", "locked"])
def test_running_jobs_are_recorded_until_they_are_settled(
    gate: Callable[[], Gate], kind: str, queues: int
) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn if kind == "thread" else g.afn, 3)
    handle = worker.bind_queue()
    if queues == 2:
        worker.bind_queue()  # two queues: every take goes through the dispatcher's lock
    jobs = [handle.add(n) for n in range(5)]
    assert g.wait_started(3)
    assert set(recorded(handle)) == set(jobs[:3])
    g.open()
    assert worker.wait(WAIT)
    assert recorded(handle) == []
    assert handle._source.taken.jobs == {}


def test_a_retried_job_leaves_the_record_once_it_is_among_the_delayed() -> None:
    worker = varmq.new_worker(
        lambda job: (_ for _ in ()).throw(RuntimeError("no")),
        retry=varmq.Retry(max_attempts=2, backoff=3600.0, max_delay=3600.0, jitter=False),
    )
    handle = worker.bind_queue()
    handle.add("x")
    deadline = time.monotonic() + WAIT
    while worker.metrics.retried == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the metrics have no wait of their own
    assert len(handle._source.delayed) == 1
    assert recorded(handle) == []


def test_frozen_waits_for_a_thread_between_its_dequeue_and_its_claim() -> None:
    taken = TakenJobs()
    taker = Taker()
    taker.job = TAKING
    taken.takers.add(taker)
    job = object()

    def finish_take() -> None:
        time.sleep(0.05)  # the thread stays between its dequeue and its claim for a while
        taker.job = job

    thread = threading.Thread(target=finish_take, name="test:taker")
    thread.start()
    with taken.frozen() as jobs:
        assert jobs == [job]
        assert taken.cutting
    thread.join(WAIT)
    assert not taken.cutting
