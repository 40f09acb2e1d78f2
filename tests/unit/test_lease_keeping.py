"""How the worker keeps the leases of storage jobs: through outages, past frozen storages, and
never by starting a job whose lease it lost.

Runs on the reference storage (real clock) behind a thin wrapper whose ``extend_lease`` can be
made to fail (storage unreachable) or hang (storage frozen).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import varmq
from varmq.testing import MemoryStorage

WAIT = 5.0


class Unreliable:
    """A reference queue whose lease renewals can fail or hang on demand."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.unreachable = False  # extend_lease raises, as a storage that cannot answer
        self.frozen: threading.Event | None = None  # extend_lease blocks until it is set
        self.renewals = 0
        self.refused_renewals = 0  # those that failed because the storage was unreachable

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)

    def enqueue(self, item: Any) -> bool:
        return bool(self._inner.enqueue(item))

    @property
    def lease_seconds(self) -> float:
        return float(self._inner.lease_seconds)

    def extend_lease(self, ack_id: str) -> bool:
        self.renewals += 1
        if self.frozen is not None:
            self.frozen.wait()
        if self.unreachable:
            self.refused_renewals += 1
            raise ConnectionError("storage unreachable")
        return bool(self._inner.extend_lease(ack_id))


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for worker in made:
        worker.stop_and_wait(timeout=WAIT)


def _errors(worker: Any) -> list[BaseException]:
    found = []
    while not worker.errs().empty():
        found.append(worker.errs().get_nowait())
    return found


def test_renewals_that_cannot_reach_storage_keep_the_lease_until_its_deadline(
    workers: list[Any],
) -> None:
    q = Unreliable(MemoryStorage().new_queue("jobs", visibility_timeout=1.2))
    release = threading.Event()
    worker = varmq.new_worker(lambda job: release.wait(WAIT), 1)
    workers.append(worker)
    assert worker.with_persistent_queue(q).add("long")
    deadline = time.monotonic() + WAIT
    while q.renewals == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for the first renewal, which the job cannot signal
    q.unreachable = True  # down for longer than a renewal period, well within the 1.2 s lease
    time.sleep(0.55)  # let renewals fail on purpose
    q.unreachable = False
    time.sleep(0.5)  # let a renewal succeed again
    release.set()
    assert worker.wait(WAIT)
    assert q.refused_renewals >= 1
    assert _errors(worker) == []  # no lost lease, and the acknowledgement was taken
    assert worker.metrics.successful == 1


def test_a_lease_unreachable_past_its_deadline_is_lost_and_buffered_jobs_are_not_run(
    workers: list[Any],
) -> None:
    inner = MemoryStorage().new_queue("jobs", visibility_timeout=0.4)
    q = Unreliable(inner)
    q.unreachable = True
    started: list[Any] = []
    release = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        started.append((job.data, job.attempt))
        release.wait(WAIT)

    worker = varmq.new_worker(run, 1, prefetch=4, auto_run=False)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    for n in range(5):
        assert handle.add(n)
    worker.start()
    deadline = time.monotonic() + WAIT
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.6)  # past every lease's deadline while the first job holds the only slot
    assert len(inner) == 5  # every lease ran out: the storage hands every job out again
    q.unreachable = False
    release.set()
    assert worker.wait(WAIT)
    # The four jobs that waited in the buffer were dropped when their leases ran out; each ran
    # only once it was delivered again (attempt 2), never on the delivery it had lost.
    assert sorted(started) == [(0, 1), (0, 2), (1, 2), (2, 2), (3, 2), (4, 2)]
    assert worker.metrics.lost == 4
    lost = [e for e in _errors(worker) if isinstance(e, varmq.LeaseLostError)]
    assert len(lost) == 5  # the running job's lease too


def test_a_frozen_storage_does_not_delay_the_lease_renewals_of_another(
    workers: list[Any],
) -> None:
    frozen = Unreliable(MemoryStorage().new_queue("frozen", visibility_timeout=0.6))
    healthy = Unreliable(MemoryStorage().new_queue("healthy", visibility_timeout=0.6))
    frozen.frozen = threading.Event()
    release = threading.Event()
    runs: list[str] = []

    def run(job: varmq.Job[Any]) -> None:
        runs.append(job.id)
        release.wait(WAIT)

    worker = varmq.new_worker(run, 2)
    workers.append(worker)
    assert worker.with_persistent_queue(frozen).add("a", job_id="a")
    assert worker.with_persistent_queue(healthy).add("b", job_id="b")
    time.sleep(1.5)  # two and a half leases: the healthy job lives only by its renewals
    release.set()
    frozen.frozen.set()
    assert worker.wait(WAIT)
    assert runs.count("b") == 1, runs
    assert [e for e in _errors(worker) if getattr(e, "job_id", None) == "b"] == []
    assert healthy.renewals >= 3


def test_stop_hands_taken_jobs_that_have_not_started_back_to_storage_at_once(
    workers: list[Any],
) -> None:
    storage = MemoryStorage()
    release = threading.Event()
    started = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    worker = varmq.new_worker(run, 1, prefetch=4, auto_run=False)
    handle = worker.with_persistent_queue(storage.new_queue("jobs", visibility_timeout=300))
    for n in range(5):
        assert handle.add(n)
    worker.start()
    assert started.wait(WAIT)
    deadline = time.monotonic() + WAIT
    while worker.num_pending < 4 and time.monotonic() < deadline:
        time.sleep(0.01)  # the prefetch arrives with the first take; nothing to wait on
    worker.stop()
    # The four jobs waiting for the busy slot are back in storage now, not after 300 s.
    assert len(storage.new_queue("jobs")) == 4
    assert worker.metrics.released == 4
    release.set()
    assert worker.wait_until_stopped(WAIT)
    assert worker.metrics.successful == 1
    attempts: list[int] = []
    other = varmq.new_worker(lambda job: attempts.append(job.attempt), 2)
    workers.append(other)
    other.with_persistent_queue(storage.new_queue("jobs"))
    assert other.wait(WAIT)
    assert attempts == [1, 1, 1, 1]  # the handed-back delivery does not count
