"""When a storage queue's acknowledgements are sent: one call per take, never held for long.

The jobs of one take are acknowledged in one ``acknowledge_many`` call when they finish close
together; an acknowledgement waits for the rest of its take at most its hold
(:data:`varmq.sources.leases.ACK_HOLD`), and not at all once the other jobs left some other way
(retried, given back at stop). Runs on the reference storage, whose calls the tests record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import varmq
import varmq.sources.leases
from varmq.testing import MemoryStorage

WAIT = 5.0


class Recorder:
    """Wraps a queue's takes and acknowledgements to keep the ack ids of each call."""

    def __init__(self, queue: Any) -> None:
        self.takes: list[list[str]] = []
        self.acks: list[list[str]] = []
        self.acked = threading.Event()
        take, ack = queue.dequeue_batch_with_attempts, queue.acknowledge_many

        def taking(n: int) -> list[tuple[bytes, str, int]]:
            got: list[tuple[bytes, str, int]] = take(n)
            if got:
                self.takes.append([ack_id for _, ack_id, _ in got])
            return got

        def acknowledging(ack_ids: list[str]) -> list[bool]:
            self.acks.append(list(ack_ids))
            answers: list[bool] = ack(ack_ids)
            self.acked.set()
            return answers

        queue.dequeue_batch_with_attempts = taking
        queue.acknowledge_many = acknowledging


@pytest.fixture
def long_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Holds far longer than any test waits: a held ack is sent only when its take is done."""
    monkeypatch.setattr(varmq.sources.leases, "ACK_HOLD", 60.0)


def _recorded_queue(storage: MemoryStorage) -> tuple[Any, Recorder]:
    queue = storage.new_queue("jobs", visibility_timeout=600)
    return queue, Recorder(queue)


@pytest.mark.usefixtures("long_hold")
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_jobs_of_one_take_are_acknowledged_in_one_call(
    storage: MemoryStorage, kind: str
) -> None:
    # Concurrency 1 takes two jobs at a time (the free slot and a prefetch of one): the first
    # finishes while the second waits, and its ack waits with it.
    queue, recorder = _recorded_queue(storage)

    async def run_async(job: varmq.Job[Any]) -> None:
        if job.data % 2:
            # The second job of each take runs a while on the loop: an ack of the first one
            # sent at once would have reached the storage by then.
            await asyncio.sleep(0.05)

    worker = varmq.new_worker(
        (lambda job: None) if kind == "sync" else run_async, 1, auto_run=False
    )
    handle = worker.with_persistent_queue(queue)
    for n in range(6):
        assert handle.add(n)
    worker.start()
    assert worker.wait(WAIT)
    assert worker.stop_and_wait(WAIT)
    assert [len(ids) for ids in recorder.takes] == [2, 2, 2]
    assert recorder.acks == recorder.takes
    assert len(queue) == 0 and queue.stats()["in_flight"] == 0


def test_an_acknowledgement_does_not_wait_past_its_hold_for_a_slow_job_of_its_take(
    storage: MemoryStorage,
) -> None:
    queue, recorder = _recorded_queue(storage)
    waited: list[bool] = []

    def run(job: varmq.Job[Any]) -> None:
        if job.data == "slow":
            # The fast job of the same take finished: its ack goes out while this one runs.
            waited.append(recorder.acked.wait(WAIT))

    worker = varmq.new_worker(run, 2, auto_run=False)
    handle = worker.with_persistent_queue(queue)
    assert handle.add("fast") and handle.add("slow")
    worker.start()
    assert worker.wait(WAIT)
    assert waited == [True]
    assert len(recorder.takes) == 1
    fast_ack = recorder.takes[0][0]
    assert recorder.acks == [[fast_ack], [recorder.takes[0][1]]]


@pytest.mark.usefixtures("long_hold")
def test_a_retried_job_of_the_take_lets_the_held_acknowledgement_go_at_once(
    storage: MemoryStorage,
) -> None:
    queue, recorder = _recorded_queue(storage)
    attempts: list[tuple[str, int]] = []

    def run(job: varmq.Job[Any]) -> None:
        attempts.append((job.data, job.attempt))
        if job.data == "flaky" and job.attempt == 1:
            raise RuntimeError("first attempt fails")

    worker = varmq.new_worker(
        run,
        1,
        retry=varmq.Retry(max_attempts=2, backoff=0.0, jitter=False),
        log_failures=False,
        auto_run=False,
    )
    handle = worker.with_persistent_queue(queue)
    assert handle.add("ok") and handle.add("flaky")
    worker.start()
    assert recorder.acked.wait(WAIT)  # without the retry counting out of the take: 60 s
    assert worker.wait(WAIT)
    assert attempts[:2] == [("ok", 1), ("flaky", 1)]
    assert ("flaky", 2) in attempts
    assert recorder.acks[0] == [recorder.takes[0][0]]


@pytest.mark.usefixtures("long_hold")
def test_stop_hands_back_the_rest_of_the_take_and_sends_the_held_acknowledgement(
    storage: MemoryStorage,
) -> None:
    queue, recorder = _recorded_queue(storage)
    started = threading.Event()
    finish = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        started.set()
        finish.wait(WAIT)

    worker = varmq.new_worker(run, 1, auto_run=False)
    handle = worker.with_persistent_queue(queue)
    assert handle.add("first") and handle.add("second")
    worker.start()
    assert started.wait(WAIT)
    begun = time.monotonic()
    worker.stop()  # "second", prefetched with "first", goes back to storage
    finish.set()
    assert worker.wait_until_stopped(WAIT)
    assert time.monotonic() - begun < WAIT  # not the 60 s hold
    assert recorder.acks == [[recorder.takes[0][0]]]
    assert worker.metrics.successful == 1 and worker.metrics.released == 1
    assert len(queue) == 1 and queue.stats()["in_flight"] == 0
