"""The worker on a storage: what a user of the storage sees end to end (``WorkerConformance``).

A part of :class:`varmq.testing.conformance.QueueConformance`. These tests run the core worker
on queues of the storage: jobs are added through the worker's handles (JSON envelopes), run once
each, and acknowledged; bytes that are not a job are reported and dead-lettered in the end.
They test the storage through the worker, not the storage alone; the other parts do that.
"""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import varmq
from varmq.contract.protocols import ICountedDelivery, IDeadLetterable
from varmq.testing._suite import (
    LEASE,
    WAIT,
    SuiteBase,
    bind,
    fresh_name,
    put,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["WorkerConformance"]


class WorkerConformance(SuiteBase):
    """The worker draining, binding late, and coping with corrupt bytes on this storage."""

    drain_jobs: ClassVar[int] = 10_000
    """How many jobs the drain test runs through the worker; a storage that only emulates the
    real one slowly (fakeredis runs Lua in Python) may lower it."""

    def test_worker_drains_every_job_exactly_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        total = self.drain_jobs
        seen: list[int] = []
        seen_lock = threading.Lock()

        def record(job: varmq.Job[int]) -> None:
            with seen_lock:
                seen.append(job.data)

        worker = varmq.new_worker(record, 8, auto_run=False)
        handle = bind(worker, q, kind)
        for i in range(total):
            assert handle.add(i, i % 7) if kind.priority else handle.add(i)
        worker.start()
        try:
            assert worker.wait(timeout=120), "the worker did not drain the queue"
        finally:
            worker.stop_and_wait(timeout=WAIT)
        assert sorted(seen) == list(range(total))
        assert len(q) == 0
        assert worker.errs().empty(), list(worker.errs().queue)[:3]

    def test_worker_bound_after_start_runs_jobs_already_stored(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        stored = self.open(harness, QueueKind(kind.priority, True), name)
        if kind.priority:
            assert varmq.new_distributed_priority_queue(stored).add("early", 1)
        else:
            assert varmq.new_distributed_queue(stored).add("early")
        done = threading.Event()
        worker = varmq.new_worker(lambda job: done.set(), 2, poll_interval=60.0)
        try:
            bind(worker, self.open(harness, kind, name), kind)
            assert done.wait(WAIT), "a job stored before the bind was not run"
        finally:
            worker.stop_and_wait(timeout=WAIT)

    def test_worker_reports_bytes_that_are_not_a_job_and_dead_letters_them_in_the_end(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ICountedDelivery, IDeadLetterable))
        assert put(q, kind, b"\xff\xfe not a job")
        ran = threading.Event()
        poison_limit = 2
        worker = varmq.new_worker(
            lambda job: ran.set(), 2, poll_interval=0.05, poison_limit=poison_limit
        )
        try:
            handle = bind(worker, q, kind)
            assert handle.add("good", 1) if kind.priority else handle.add("good")
            assert ran.wait(WAIT), "a job behind the corrupt bytes did not run"
            assert worker.wait(WAIT)  # "good" is acknowledged before any lease time passes
            deadline, seen = time.monotonic() + WAIT, 0
            while not handle.dead_letters():
                assert time.monotonic() < deadline, "the corrupt bytes were never dead-lettered"
                reported = sum(isinstance(e, varmq.ParseJobError) for e in worker.errs().queue)
                if reported > seen:
                    seen = reported
                    if reported < poison_limit:  # delivered once more: let its lease run out
                        harness.advance(LEASE + 0.1)
                    # The delivery at the limit is reported before the worker dead-letters it
                    # under its lease: running that lease out too could hand it out again.
                time.sleep(0.01)
            [letter] = handle.dead_letters()
            assert (letter.data, letter.attempts) == (b"\xff\xfe not a job", poison_limit), letter
            assert worker.is_active  # nothing crashed
        finally:
            worker.stop_and_wait(timeout=WAIT)
        errors = list(worker.errs().queue)
        assert errors and all(isinstance(e, varmq.ParseJobError) for e in errors), errors

    def test_worker_acknowledges_only_after_the_function_returned(
        self, harness: StorageHarness
    ) -> None:
        kind = QueueKind(False, False)
        name = fresh_name()
        q = self.open(harness, kind, name)
        observer = self.open(harness, kind, name)
        started, release = threading.Event(), threading.Event()

        def hold(job: varmq.Job[str]) -> None:
            started.set()
            release.wait(WAIT)

        worker = varmq.new_worker(hold, 1)
        try:
            assert worker.with_persistent_queue(q).add("x")
            assert started.wait(WAIT)
            # Running and unacknowledged: in flight, so neither waiting nor takeable.
            assert len(observer) == 0 and observer.dequeue_with_ack_id() is None
            release.set()
            assert worker.wait(WAIT)
        finally:
            release.set()
            worker.stop_and_wait(timeout=WAIT)
        assert worker.metrics.completed == 1 and worker.errs().empty()
        assert observer.dequeue_with_ack_id() is None
