"""The conformance tests of job progress: ``ProgressConformance``.

A part of :class:`~varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. Each test runs when the storage claims :class:`~varmq.contract.protocols.IJobProgress`
(``PROGRESS_EXTENSIONS``) and :class:`~varmq.contract.protocols.IJobRecords`. The semantics
checked are those of ``varmq.contract.protocols``, "Job progress":

- ``set_progress(ack_id, progress)`` under a held lease stores the bytes as they were given,
  read through ``job_record`` from another object; a later write replaces them;
- it is fenced by the lease: a stale, unknown or foreign ack id stores nothing (``False``);
- it changes nothing else: not the record's state, attempts, times or outcome, not the lease;
- a job without a record (a queue without ``keep_results``, a job added without an id) keeps
  no progress (``False``);
- every take (a retry, a redelivery) starts without progress, and the ended record keeps the
  last progress of its run, whatever ended it;
- it works after ``close()``, checks its argument like an outcome, and raises while the
  storage cannot answer;
- the worker: a running job's ``set_progress`` is read by id from another object, and its
  ended record keeps the last value it set.

Queues here are opened with ``keep_results=60`` unless a test says otherwise.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import varmq
from varmq.contract.protocols import (
    IDeadLetterable,
    IJobProgress,
    IJobRecords,
    ILeaseExtendable,
    INackable,
    StoredJobRecord,
)
from varmq.testing._suite import (
    LEASE,
    LONG_LEASE,
    WAIT,
    SuiteBase,
    bind,
    fresh_name,
    priority_arg,
    put,
    take_one,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["ProgressConformance"]

KEEP = 60.0
"""``keep_results`` of the queues in these tests, in seconds."""
HALF = b'{"fraction":0.5,"message":"half"}'
"""A progress as the worker writes it."""


def _add(q: Any, kind: QueueKind, job_id: str) -> bool:
    """``enqueue_dedup`` of a job with ``job_id`` (priority 0 on priority queues)."""
    return bool(q.enqueue_dedup(job_id.encode(), job_id, priority_arg(kind)))


def _record(q: Any, job_id: str) -> StoredJobRecord:
    record: StoredJobRecord | None = q.job_record(job_id)
    assert record is not None, f"no record of {job_id!r}"
    return record


def _progress(q: Any, job_id: str) -> bytes | None:
    return _record(q, job_id).get("progress", b"<missing>")


def _producer(q: Any, kind: QueueKind) -> Any:
    """A producer-only handle on the distributed queue ``q``."""
    if kind.priority:
        return varmq.new_distributed_priority_queue(q)
    return varmq.new_distributed_queue(q)


def _add_job(handle: Any, kind: QueueKind, job_id: str) -> bool:
    """``handle.add`` of a job with ``job_id`` (priority 0 on priority queues)."""
    if kind.priority:
        return bool(handle.add(job_id, 0, job_id=job_id))
    return bool(handle.add(job_id, job_id=job_id))


def _eventually(read: Callable[[], Any], holds: Callable[[Any], bool], what: str) -> Any:
    """Read (another process's view of a record) until ``holds`` says it shows ``what``."""
    deadline = time.monotonic() + WAIT
    while True:
        seen = read()
        if holds(seen):
            return seen
        assert time.monotonic() < deadline, f"never saw {what}; last: {seen!r}"
        time.sleep(0.01)


class ProgressConformance(SuiteBase):
    """Tests of ``IJobProgress``."""

    def progress_queue(
        self,
        harness: StorageHarness,
        kind: QueueKind,
        name: str | None = None,
        lease: float = LONG_LEASE,
        *,
        needs: tuple[type, ...] = (),
        **options: Any,
    ) -> Any:
        """Open a queue of ``kind`` that keeps records (``keep_results=KEEP``); skip the test
        unless the storage claims ``IJobRecords``, ``IJobProgress`` and each of ``needs``."""
        options.setdefault("keep_results", KEEP)
        needed = (IJobRecords, IJobProgress, *needs)
        return self.open(harness, kind, name, lease, needs=needed, **options)

    # -- writing and reading -----------------------------------------------------------------

    def test_progress_set_under_a_held_lease_is_read_through_another_object(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.progress_queue(harness, kind, name)
        other = self.progress_queue(harness, kind, name)
        assert _add(q, kind, "job-1")
        assert _progress(other, "job-1") is None
        _, ack_id = take_one(q)
        assert _progress(other, "job-1") is None
        assert q.set_progress(ack_id, HALF) is True
        progress = _progress(other, "job-1")
        assert type(progress) is bytes and progress == HALF
        assert q.set_progress(ack_id, b'{"fraction":0.75,"message":null}') is True
        assert _progress(other, "job-1") == b'{"fraction":0.75,"message":null}'

    def test_progress_bytes_come_back_exactly_as_given(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind)
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        values: list[tuple[Any, bytes]] = [
            (b"", b""),
            (b"\x00\xff\xfe not UTF-8 \x80", b"\x00\xff\xfe not UTF-8 \x80"),
            (bytes(range(256)) * 8, bytes(range(256)) * 8),
            (bytearray(b"[1]"), b"[1]"),
            (memoryview(b"{}"), b"{}"),
            ("caf\u00e9", "caf\u00e9".encode()),
        ]
        for given, stored in values:
            assert q.set_progress(ack_id, given) is True
            assert _progress(q, "job-1") == stored

    def test_a_progress_that_is_not_bytes_or_str_raises_and_stores_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind)
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        for bad in (0.5, None, {"fraction": 0.5}, [HALF]):
            with pytest.raises(TypeError, match="progress"):
                q.set_progress(ack_id, bad)
        with pytest.raises(ValueError, match="progress"):
            q.set_progress(ack_id, "lone \ud800")
        assert _progress(q, "job-1") is None
        assert q.acknowledge(ack_id) is True  # the lease was kept

    # -- fencing -------------------------------------------------------------------------------

    def test_a_consumer_whose_lease_was_taken_over_cannot_write_progress(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert _add(q, kind, "job-1")
        _, stale = take_one(q)
        assert q.set_progress(stale, b"first run") is True
        harness.advance(LEASE * 1.2)
        assert q.set_progress(stale, b"expired") is False  # ran out, not taken yet
        assert _progress(q, "job-1") == b"first run"
        _, current = take_one(q)  # a redelivery: starts without progress
        assert _progress(q, "job-1") is None
        assert q.set_progress(stale, b"stale") is False
        assert q.set_progress(current, b"second run") is True
        assert _progress(q, "job-1") == b"second run"
        for unknown in ("no-such-lease", "", 12345, None):
            assert q.set_progress(unknown, b"x") is False
        assert _progress(q, "job-1") == b"second run"

    def test_a_settled_job_takes_no_more_progress(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind)
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        assert q.set_progress(ack_id, HALF) is True
        assert q.acknowledge(ack_id) is True
        assert q.set_progress(ack_id, b"after the end") is False
        assert _progress(q, "job-1") == HALF

    # -- nothing else changes ------------------------------------------------------------------

    def test_a_progress_write_changes_no_state_attempts_times_or_lease(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind)
        assert _add(q, kind, "job-1") and _add(q, kind, "job-2")
        _, ack_id = take_one(q)
        harness.advance(0.3)  # a write made later than the take must not look like a take
        before = _record(q, "job-1")
        waiting = len(q)
        assert q.set_progress(ack_id, HALF) is True
        after = _record(q, "job-1")
        assert {k: v for k, v in after.items() if k != "progress"} == {
            k: v for k, v in before.items() if k != "progress"
        }
        assert after["state"] == "running" and after["attempts"] == 1
        assert len(q) == waiting
        queued = _record(q, "job-2")
        assert queued["state"] == "queued" and queued.get("progress") is None
        if isinstance(q, ILeaseExtendable):
            assert q.extend_lease(ack_id) is True
        assert q.acknowledge(ack_id) is True

    # -- jobs without a record -------------------------------------------------------------------

    def test_a_job_without_a_record_keeps_no_progress(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        plain = self.progress_queue(harness, kind, keep_results=0)
        assert _add(plain, kind, "job-1")
        _, ack_id = take_one(plain)
        assert plain.set_progress(ack_id, HALF) is False
        assert plain.job_record("job-1") is None
        q = self.progress_queue(harness, kind)
        assert put(q, kind, b"anonymous")  # no id: no record
        _, ack_id = take_one(q)
        assert q.set_progress(ack_id, HALF) is False
        assert q.acknowledge(ack_id) is True

    # -- attempts and ends -------------------------------------------------------------------

    def test_a_retry_starts_without_progress(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind, needs=(INackable,))
        assert _add(q, kind, "job-1")
        _, first = take_one(q)
        assert q.set_progress(first, HALF) is True
        assert q.nack(first, 0) is True
        _, second = take_one(q)
        record = _record(q, "job-1")
        assert (record["state"], record["attempts"], record["progress"]) == ("running", 2, None)
        assert q.set_progress(first, b"stale") is False
        assert q.set_progress(second, b"again") is True
        assert _progress(q, "job-1") == b"again"

    @pytest.mark.parametrize("end", ["acknowledge", "result", "fail", "dead", "cancelled"])
    def test_the_ended_record_keeps_the_last_progress(
        self, harness: StorageHarness, kind: QueueKind, end: str
    ) -> None:
        if end == "dead":
            self.require(IDeadLetterable)
        name = fresh_name()
        q = self.progress_queue(harness, kind, name)
        other = self.progress_queue(harness, kind, name)
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        assert q.set_progress(ack_id, b"first") is True
        assert q.set_progress(ack_id, HALF) is True
        if end == "acknowledge":
            assert q.acknowledge_many([ack_id]) == [True]
        elif end == "result":
            assert q.acknowledge_with_results([(ack_id, b"1")]) == [True]
        elif end == "fail":
            assert q.fail(ack_id, b'{"type": "E"}') is True
        elif end == "dead":
            assert q.dead_letter_with_error(ack_id, "E", b'{"type": "E"}') is True
        else:
            assert q.cancel("job-1") is True
            assert q.fail(ack_id, b'{"type": "E"}') is True
        ended = {"acknowledge": "succeeded", "result": "succeeded", "fail": "failed"}
        record = _record(other, "job-1")
        assert (record["state"], record["progress"]) == (ended.get(end, end), HALF)

    def test_a_requeued_dead_letter_starts_without_progress(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind, needs=(IDeadLetterable,))
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        assert q.set_progress(ack_id, HALF) is True
        assert q.dead_letter(ack_id, "boom") is True
        assert _progress(q, "job-1") == HALF
        assert q.requeue_dead() == 1
        record = _record(q, "job-1")
        assert (record["state"], record["attempts"], record["progress"]) == ("queued", 0, None)

    # -- after close, and while the storage cannot answer ------------------------------------

    def test_set_progress_works_after_close(self, harness: StorageHarness, kind: QueueKind) -> None:
        name = fresh_name()
        q = self.progress_queue(harness, kind, name)
        observer = self.progress_queue(harness, kind, name)
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        q.close()
        assert q.set_progress(ack_id, HALF) is True
        assert _progress(observer, "job-1") == HALF

    def test_a_progress_write_while_the_storage_cannot_answer_raises_and_changes_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.progress_queue(harness, kind)
        assert _add(q, kind, "job-1")
        _, ack_id = take_one(q)
        assert q.set_progress(ack_id, b"before") is True
        with self._storage_down(harness), pytest.raises(Exception) as raised:
            q.set_progress(ack_id, b"during")
        assert not isinstance(raised.value, TypeError | ValueError)
        assert _progress(q, "job-1") == b"before"
        assert q.set_progress(ack_id, b"after") is True

    @contextlib.contextmanager
    def _storage_down(self, harness: StorageHarness) -> Iterator[None]:
        outage = getattr(harness, "outage", None)
        if outage is None:
            pytest.skip("the harness cannot take the storage away (no outage)")
        with outage():
            yield

    # -- the worker --------------------------------------------------------------------------

    def test_a_running_job_s_progress_is_read_by_id_and_its_end_keeps_the_last(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.progress_queue(harness, kind, name)
        reader = _producer(self.progress_queue(harness, QueueKind(kind.priority, True), name), kind)
        halfway, finish = threading.Event(), threading.Event()

        def work(job: varmq.Job[str]) -> None:
            for step in range(1, 1001):  # far more calls than the storage sees
                job.set_progress(step / 2000, f"step {step}")
            halfway.set()
            assert finish.wait(WAIT)
            job.set_progress(1.0, "done")  # at once before its end: still kept

        worker = varmq.new_worker(work, 1)
        try:
            bind(worker, q, kind)
            assert _add_job(reader, kind, "job-1")
            assert halfway.wait(WAIT)
            running = _eventually(
                lambda: reader.job("job-1"),
                lambda r: r.progress is not None and r.progress.fraction == 0.5,
                "the last progress of the loop",
            )
            assert running.state == "running" and running.progress.message == "step 1000"
            finish.set()
            assert reader.result_of("job-1", timeout=WAIT) is None
            ended = reader.job("job-1")
            assert ended is not None and ended.state == "succeeded"
            assert (ended.progress.fraction, ended.progress.message) == (1.0, "done")
        finally:
            finish.set()
            worker.stop_and_wait(timeout=WAIT)
        assert worker.errs().empty(), list(worker.errs().queue)
