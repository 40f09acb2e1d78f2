"""The conformance tests of job records: ``RecordConformance``.

A part of :class:`~varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. Each test runs when the storage claims :class:`~varmq.contract.protocols.IJobRecords` (the
notification test: :class:`~varmq.contract.protocols.IRecordSubscribable`), both in
``RECORD_EXTENSIONS``. The semantics checked are those of ``varmq.contract.protocols``, "Job
records":

- every state a job's record passes through: queued, delayed, running, succeeded, failed,
  dead, cancelled, with its attempts, times and outcome bytes, seen through any object;
- the outcome is written in the same atomic step as the settle that ends the job: a stale ack
  id (a consumer whose lease expired, killed before it settled) changes no record, and a job
  whose consumer died is queued again, never succeeded before it really ran;
- ended records are kept ``keep_results`` seconds (time moved by ``harness.advance``) and at
  most ``keep_results_limit`` of them, and hold their job id meanwhile;
- ``cancel`` of a queued, delayed and running job, and what a consumer hears of it at its next
  lease renewal (``extend_lease_or_cancel``);
- the option checks (``keep_results``, ``keep_results_limit``) and argument checks shared by
  every storage;
- the worker on such a queue: a result worker's values and errors read from another object,
  a value JSON cannot hold failing its job, a running job cancelled by id (plain and
  ``async def``), and err and result workers refusing a queue without records.

Queues here are opened with ``keep_results=60`` unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import varmq
from varmq.contract.protocols import (
    ENDED_STATES,
    JOB_STATES,
    MAX_COUNT,
    MAX_DELAY,
    IDeadLetterable,
    IDelayedEnqueue,
    IJobProgress,
    IJobRecords,
    ILeaseExtendable,
    ILeaseReleasable,
    INackable,
    IRecordSubscribable,
    IScheduleMarks,
)
from varmq.testing._suite import (
    DELAY,
    LEASE,
    LONG_LEASE,
    WAIT,
    SuiteBase,
    bind,
    drain,
    fresh_name,
    priority_arg,
    put,
    take_one,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["KEEP", "RecordConformance"]

KEEP = 60.0
"""``keep_results`` of the queues in these tests, in seconds."""
OLD_UNIX_TIME = 1_000_000_000.0
"""2001-09-09: any time in Unix seconds is later than this."""
RECORD_KEYS = {
    "id",
    "state",
    "attempts",
    "result",
    "error",
    "enqueued_at",
    "started_at",
    "finished_at",
    "cancel_requested",
}


def _add(q: Any, kind: QueueKind, item: bytes, job_id: str, priority: int = 0) -> bool:
    """``enqueue_dedup`` with ``priority`` on priority queues."""
    return bool(q.enqueue_dedup(item, job_id, priority_arg(kind, priority)))


def _state(q: Any, job_id: str) -> str | None:
    record = q.job_record(job_id)
    return None if record is None else str(record["state"])


class RecordConformance(SuiteBase):
    """Tests of ``IJobRecords`` and ``IRecordSubscribable``."""

    def records(
        self,
        harness: StorageHarness,
        kind: QueueKind,
        name: str | None = None,
        lease: float = LONG_LEASE,
        *,
        needs: Sequence[type] = (),
        **options: Any,
    ) -> Any:
        """Open a queue of ``kind`` that keeps records (``keep_results=KEEP``); skip the test
        unless the storage claims ``IJobRecords`` and each protocol of ``needs``."""
        options.setdefault("keep_results", KEEP)
        return self.open(harness, kind, name, lease, needs=(IJobRecords, *needs), **options)

    # -- the options -----------------------------------------------------------------------

    def test_keep_results_is_the_option_and_a_queue_without_it_keeps_no_record(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IJobRecords)
        off = self.open(harness, kind)
        assert off.keep_results == 0
        assert _add(off, kind, b"a", "job-1")
        assert off.job_record("job-1") is None
        assert off.cancel("job-1") is False
        assert len(off) == 1  # not cancelled: it has no record

    def test_keep_results_is_stored_with_the_queue_and_an_opener_without_it_inherits_it(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # A producer that leaves keep_results out must not add jobs without records (and so
        # without the dedup a kept record gives) to a queue whose consumers keep them.
        name = fresh_name()
        on = self.records(harness, kind, name)
        producer = self.open(harness, kind, name)
        assert producer.keep_results == pytest.approx(KEEP)
        assert _add(producer, kind, b"a", "job-1")
        record = on.job_record("job-1")
        assert record is not None and record["state"] == "queued"
        (_, ack_id) = take_one(on)
        on.acknowledge(ack_id)
        assert _state(producer, "job-1") == "succeeded"
        assert _add(producer, kind, b"again", "job-1")  # the kept record holds the id:
        assert len(on) == 0 and _state(producer, "job-1") == "succeeded"  # nothing added
        with pytest.raises(ValueError, match=r"keep_results=0 given.*keep_results=60"):
            self.open(harness, kind, name, keep_results=0)
        same = self.records(harness, kind, name)  # the stored value, given again: accepted
        assert same.keep_results == pytest.approx(KEEP)

    def test_keep_results_must_be_seconds_from_zero_to_a_century(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IJobRecords)
        wrong_types: tuple[Any, ...] = ("60", b"1", True, None, [1.0])
        for bad in wrong_types:
            with pytest.raises(TypeError, match=re.escape(f"keep_results={bad!r}")):
                self.open(harness, kind, keep_results=bad)
        out_of_range: tuple[Any, ...] = (-1, -0.5, math.nan, math.inf, MAX_DELAY * 1.001)
        for bad in out_of_range:
            with pytest.raises(ValueError, match=re.escape(f"keep_results={bad!r}")):
                self.open(harness, kind, keep_results=bad)
        for good in (0, 0.5, 3600, MAX_DELAY):
            assert self.open(harness, kind, keep_results=good).keep_results == pytest.approx(good)

    def test_keep_results_limit_must_be_an_int_of_at_least_one(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IJobRecords)
        for bad in (1.5, 2.0, "2", True, None):
            with pytest.raises(TypeError, match=re.escape(f"keep_results_limit={bad!r}")):
                self.records(harness, kind, keep_results_limit=bad)
        for bad in (0, -1, MAX_COUNT + 1):
            with pytest.raises(ValueError, match=re.escape(f"keep_results_limit={bad!r}")):
                self.records(harness, kind, keep_results_limit=bad)
        self.records(harness, kind, keep_results_limit=1)
        self.records(harness, kind, keep_results_limit=MAX_COUNT)

    def test_job_record_and_cancel_take_a_non_empty_str_job_id(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        for call in (q.job_record, q.cancel):
            for bad in (5, None, b"job-1", ["job-1"]):
                with pytest.raises(TypeError, match="job_id"):
                    call(bad)
            for empty in ("", "lone \ud800"):
                with pytest.raises(ValueError, match="job_id"):
                    call(empty)

    def test_an_outcome_that_is_not_bytes_or_str_raises_and_keeps_the_lease(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-a") and _add(q, kind, b"b", "job-b")
        _, a = take_one(q)
        _, b = take_one(q)
        with pytest.raises(TypeError, match="result"):
            q.acknowledge_with_results([(a, b"fine"), (b, 12345)])
        with pytest.raises(TypeError, match="error"):
            q.fail(a, {"type": "ValueError"})
        assert _state(q, "job-a") == _state(q, "job-b") == "running"
        assert q.acknowledge_with_results([(a, "caf\u00e9"), (b, bytearray(b"[1]"))]) == [
            True,
            True,
        ]
        record = q.job_record("job-a")
        assert record is not None and record["result"] == "caf\u00e9".encode()
        record = q.job_record("job-b")
        assert record is not None and type(record["result"]) is bytes
        assert record["result"] == b"[1]"

    # -- the states ------------------------------------------------------------------------

    def test_a_job_added_with_an_id_is_queued_with_no_attempt_yet(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1")
        record = q.job_record("job-1")
        assert record is not None
        # A storage that keeps progress returns it too (conformance_progress).
        progress = {"progress"} if IJobProgress in self.extensions else set()
        assert set(record) == RECORD_KEYS | progress
        assert record["id"] == "job-1"
        assert record["state"] == "queued"
        assert record["attempts"] == 0
        assert record["result"] is None and record["error"] is None
        assert type(record["enqueued_at"]) is float and record["enqueued_at"] > OLD_UNIX_TIME
        assert record["started_at"] is None and record["finished_at"] is None
        assert record["cancel_requested"] is False
        assert q.job_record("no-such-job") is None

    def test_a_job_added_without_an_id_has_no_record(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert put(q, kind, b"anonymous")
        _, ack_id = take_one(q)
        assert q.acknowledge_with_results([(ack_id, b"1")]) == [True]
        assert q.job_record("anonymous") is None
        if IDelayedEnqueue in self.extensions:
            assert q.enqueue_delayed(b"later", DELAY, None, priority_arg(kind))
            assert q.cancel("later") is False

    def test_a_delayed_job_is_delayed_until_it_is_due_then_queued(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, needs=(IDelayedEnqueue,))
        assert q.enqueue_delayed(b"later", DELAY, "job-1", priority_arg(kind))
        assert _state(q, "job-1") == "delayed"
        harness.advance(DELAY * 1.2)
        assert _state(q, "job-1") == "queued"
        assert take_one(q)[0] == b"later"
        assert _state(q, "job-1") == "running"

    def test_a_taken_job_is_running_with_its_attempt_and_when_it_started(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1")
        [(_, _, attempt)] = q.dequeue_batch_with_attempts(1)
        record = q.job_record("job-1")
        assert record is not None
        assert (record["state"], record["attempts"], attempt) == ("running", 1, 1)
        assert record["started_at"] is not None
        assert record["enqueued_at"] <= record["started_at"]
        assert record["finished_at"] is None

    def test_an_acknowledged_job_succeeded_with_its_result(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        harness.advance(0.25)
        assert q.acknowledge_with_results([(ack_id, b'{"total": 42}')]) == [True]
        record = q.job_record("job-1")
        assert record is not None
        assert record["state"] == "succeeded"
        assert record["result"] == b'{"total": 42}' and record["error"] is None
        assert record["attempts"] == 1
        assert record["started_at"] is not None and record["finished_at"] is not None
        assert record["enqueued_at"] <= record["started_at"] <= record["finished_at"]
        assert len(q) == 0 and q.dequeue_with_ack_id() is None

    def test_a_plain_acknowledgement_records_success_without_a_result(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        _, first = take_one(q)
        _, second = take_one(q)
        assert q.acknowledge(first)
        assert q.acknowledge_many([second]) == [True]
        for job_id in ("job-1", "job-2"):
            record = q.job_record(job_id)
            assert record is not None
            assert (record["state"], record["result"]) == ("succeeded", None)

    def test_a_failed_job_is_failed_with_its_error_and_never_handed_out_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, lease=LEASE)
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        error = b'{"type": "ValueError", "message": "bad"}'
        assert q.fail(ack_id, error) is True
        record = q.job_record("job-1")
        assert record is not None
        assert (record["state"], record["error"], record["result"]) == ("failed", error, None)
        assert record["finished_at"] is not None
        assert q.fail(ack_id, error) is False  # fenced like an acknowledgement
        harness.advance(LEASE * 1.2)
        assert len(q) == 0 and q.dequeue_with_ack_id() is None

    def test_a_nacked_job_is_delayed_then_queued_and_keeps_counting_attempts(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, needs=(INackable,))
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        assert q.nack(ack_id, DELAY)
        record = q.job_record("job-1")
        assert record is not None and (record["state"], record["attempts"]) == ("delayed", 1)
        harness.advance(DELAY * 1.2)
        assert _state(q, "job-1") == "queued"
        [(_, again, attempt)] = q.dequeue_batch_with_attempts(1)
        record = q.job_record("job-1")
        assert record is not None and (record["state"], record["attempts"]) == ("running", 2)
        assert attempt == 2
        assert q.nack(again, 0)
        assert _state(q, "job-1") == "queued"

    def test_an_expired_lease_puts_the_record_back_to_queued(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert _add(q, kind, b"a", "job-1")
        take_one(q)
        harness.advance(LEASE * 1.2)
        record = q.job_record("job-1")
        assert record is not None and (record["state"], record["attempts"]) == ("queued", 1)

    def test_a_released_job_is_queued_and_its_delivery_does_not_count(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, needs=(ILeaseReleasable,))
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        assert q.release(ack_id)
        record = q.job_record("job-1")
        assert record is not None and (record["state"], record["attempts"]) == ("queued", 0)

    def test_a_dead_lettered_job_is_dead_with_its_error(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, needs=(IDeadLetterable,))
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        _, first = take_one(q)
        _, second = take_one(q)
        detail = b'{"type": "KeyError", "message": "x"}'
        assert q.dead_letter_with_error(first, "KeyError: x", detail) is True
        assert q.dead_letter(second, "plain") is True
        dead = q.job_record("job-1")
        assert dead is not None and (dead["state"], dead["error"]) == ("dead", detail)
        assert dead["finished_at"] is not None
        plain = q.job_record("job-2")
        assert plain is not None and (plain["state"], plain["error"]) == ("dead", None)
        assert [letter["error"] for letter in q.dead_letters()] == ["KeyError: x", "plain"]
        assert q.dead_letter_with_error(first, "again", detail) is False

    def test_a_requeued_dead_letter_is_queued_with_its_attempts_reset(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, needs=(IDeadLetterable,))
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        assert q.dead_letter_with_error(ack_id, "boom", b'{"type": "E"}')
        assert q.requeue_dead() == 1
        record = q.job_record("job-1")
        assert record is not None
        assert (record["state"], record["attempts"], record["error"]) == ("queued", 0, None)
        assert record["finished_at"] is None
        _, again = take_one(q)
        assert q.acknowledge_with_results([(again, b"true")]) == [True]
        assert _state(q, "job-1") == "succeeded"

    def test_purged_jobs_are_cancelled(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        _, running = take_one(q)
        q.purge()
        assert _state(q, "job-2") == "cancelled"
        assert _state(q, "job-1") == "running"  # in flight: purge leaves it
        assert q.acknowledge(running)

    def test_every_object_of_a_queue_sees_and_changes_the_same_records(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        producer = self.records(harness, kind, name)
        consumer = self.records(harness, kind, name)
        observer = self.records(harness, kind, name)
        assert _add(producer, kind, b"a", "job-1")
        assert _state(observer, "job-1") == "queued"
        _, ack_id = take_one(consumer)
        assert _state(observer, "job-1") == "running"
        assert consumer.acknowledge_with_results([(ack_id, b'"done"')]) == [True]
        record = observer.job_record("job-1")
        assert record is not None and (record["state"], record["result"]) == (
            "succeeded",
            b'"done"',
        )
        assert record["state"] in JOB_STATES and record["state"] in ENDED_STATES

    # -- the outcome and the settle: one step ---------------------------------------------------

    def test_a_job_whose_consumer_died_is_never_succeeded_before_it_really_ran(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        name = fresh_name()
        killed = self.records(harness, kind, name, lease=LEASE)
        rescuer = self.records(harness, kind, name, lease=LEASE)
        assert _add(killed, kind, b"a", "job-1")
        take_one(killed)  # and the consumer dies: no settle ever comes
        assert _state(rescuer, "job-1") == "running"
        harness.advance(LEASE * 1.2)
        assert _state(rescuer, "job-1") == "queued"
        [(_, ack_id, attempt)] = rescuer.dequeue_batch_with_attempts(1)
        assert attempt == 2
        assert rescuer.acknowledge_with_results([(ack_id, b'"rerun"')]) == [True]
        record = rescuer.job_record("job-1")
        assert record is not None
        assert (record["state"], record["result"], record["attempts"]) == (
            "succeeded",
            b'"rerun"',
            2,
        )

    def test_a_stale_settle_with_an_outcome_is_refused_and_changes_no_record(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert _add(q, kind, b"a", "job-1")
        _, stale = take_one(q)
        harness.advance(LEASE * 1.2)
        _, fresh = take_one(q)
        assert q.acknowledge_with_results([(stale, b'"stale"')]) == [False]
        assert q.fail(stale, b'{"type": "E"}') is False
        if IDeadLetterable in self.extensions:
            assert q.dead_letter_with_error(stale, "E", b'{"type": "E"}') is False
        record = q.job_record("job-1")
        assert record is not None
        assert (record["state"], record["attempts"], record["result"]) == ("running", 2, None)
        assert q.acknowledge_with_results([(fresh, b'"fresh"')]) == [True]
        record = q.job_record("job-1")
        assert record is not None and record["result"] == b'"fresh"'

    def test_acknowledge_with_results_answers_each_pair_in_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-a") and _add(q, kind, b"b", "job-b")
        _, a = take_one(q)
        _, b = take_one(q)
        answers = q.acknowledge_with_results(
            [(a, b"1"), ("no-such-ack-id", b"x"), (b, b"2"), (a, b"again")]
        )
        assert answers == [True, False, True, False]
        assert q.acknowledge_with_results([]) == []
        for job_id, result in (("job-a", b"1"), ("job-b", b"2")):
            record = q.job_record(job_id)
            assert record is not None and (record["state"], record["result"]) == (
                "succeeded",
                result,
            )

    def test_a_large_batch_of_results_records_each_job_with_its_own_result(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # More pairs than a storage may settle in one statement, taken in one order and
        # acknowledged in another, with refused pairs among them: each answer and each record
        # belongs to its own pair.
        q = self.records(harness, kind)
        count = 70
        for i in range(count):
            assert _add(q, kind, b"x", f"job-{i}")
        taken = [take_one(q)[1] for _ in range(count)]
        pairs: list[tuple[str, bytes]] = []
        expected: list[bool] = []
        for i in reversed(range(count)):
            pairs.append((taken[i], str(i).encode()))
            expected.append(True)
            if i % 9 == 0:
                pairs.append((f"no-such-ack-id-{i}", b"x"))
                expected.append(False)
            if i % 13 == 0:
                pairs.append((taken[i], b"again"))  # a second settle of the same lease
                expected.append(False)
        assert q.acknowledge_with_results(pairs) == expected
        for i in range(count):
            record = q.job_record(f"job-{i}")
            assert record is not None
            assert (record["state"], record["result"]) == ("succeeded", str(i).encode())
        assert len(q) == 0

    # -- what a kept record holds, and for how long ------------------------------------------

    def test_a_job_id_stays_taken_while_its_record_is_kept(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"first", "job-1")
        _, ack_id = take_one(q)
        assert q.acknowledge_with_results([(ack_id, b'"first"')]) == [True]
        assert _add(q, kind, b"second", "job-1") is True
        if IDelayedEnqueue in self.extensions:
            assert q.enqueue_delayed(b"third", 0, "job-1", priority_arg(kind)) is True
        assert len(q) == 0 and q.dequeue_with_ack_id() is None
        record = q.job_record("job-1")
        assert record is not None and record["result"] == b'"first"'

    def test_an_ended_record_is_dropped_after_keep_results_and_frees_its_id(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, keep_results=1.0)
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        _, ack_id = take_one(q)
        assert q.acknowledge_with_results([(ack_id, b"1")]) == [True]
        harness.advance(0.6)
        assert _state(q, "job-1") == "succeeded"
        harness.advance(0.6)
        assert q.job_record("job-1") is None
        assert _state(q, "job-2") == "queued"  # a job still waiting keeps its record
        assert _add(q, kind, b"again", "job-1")
        assert _state(q, "job-1") == "queued"
        assert len(q) == 2

    def test_keep_results_limit_keeps_the_newest_ended_records(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, keep_results_limit=3)
        assert _add(q, kind, b"waiting", "waiting")
        for i in range(5):
            assert _add(q, kind, f"job-{i}".encode(), f"job-{i}")
        assert take_one(q)[0] == b"waiting"  # taken and kept running: not an ended record
        for _ in range(5):
            _, ack_id = take_one(q)
            assert q.acknowledge(ack_id)
        assert [q.job_record(f"job-{i}") is not None for i in range(5)] == [
            False,
            False,
            True,
            True,
            True,
        ]
        assert _state(q, "waiting") == "running"

    # -- cancel ----------------------------------------------------------------------------

    def test_cancel_removes_a_queued_job_at_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        assert q.cancel("job-1") is True
        record = q.job_record("job-1")
        assert record is not None
        assert (record["state"], record["attempts"]) == ("cancelled", 0)
        assert record["finished_at"] is not None
        assert len(q) == 1 and q.values() == [b"b"]
        assert take_one(q)[0] == b"b"
        assert q.cancel("job-1") is False  # ended

    def test_cancel_removes_a_delayed_job_at_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, needs=(IDelayedEnqueue,))
        assert q.enqueue_delayed(b"later", DELAY, "job-1", priority_arg(kind))
        assert q.cancel("job-1") is True
        assert _state(q, "job-1") == "cancelled"
        harness.advance(DELAY * 1.2)
        assert len(q) == 0 and q.dequeue_with_ack_id() is None

    def test_cancel_of_an_unknown_or_ended_job_finds_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert q.cancel("no-such-job") is False
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        assert q.acknowledge(ack_id)
        assert q.cancel("job-1") is False
        record = q.job_record("job-1")
        assert record is not None and record["state"] == "succeeded"
        assert record["cancel_requested"] is False

    def test_cancel_flags_a_running_job_and_its_consumer_hears_it_at_renewal(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        consumer = self.records(harness, kind, name)
        admin = self.records(harness, kind, name)
        assert _add(consumer, kind, b"a", "job-1") and _add(consumer, kind, b"b", "job-2")
        _, ack_id = take_one(consumer)
        _, other = take_one(consumer)
        assert consumer.extend_lease_or_cancel(ack_id) == "held"
        assert admin.cancel("job-1") is True
        assert admin.cancel("job-1") is True  # still there to cancel
        record = admin.job_record("job-1")
        assert record is not None
        assert (record["state"], record["cancel_requested"]) == ("running", True)
        assert consumer.extend_lease_or_cancel(ack_id) == "cancel"
        assert consumer.extend_lease_or_cancel(other) == "held"
        assert consumer.fail(ack_id, b'{"type": "JobCancelledError"}') is True
        record = admin.job_record("job-1")
        assert record is not None and record["state"] == "cancelled"
        assert record["error"] == b'{"type": "JobCancelledError"}'
        assert consumer.extend_lease_or_cancel(ack_id) == "lost"
        assert consumer.acknowledge(other)

    def test_a_running_job_acknowledged_after_a_cancel_request_succeeded(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        assert q.cancel("job-1")
        assert q.acknowledge_with_results([(ack_id, b'"made it"')]) == [True]
        record = q.job_record("job-1")
        assert record is not None
        assert (record["state"], record["result"]) == ("succeeded", b'"made it"')

    def test_a_running_job_with_a_cancel_request_is_never_handed_out_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(
            harness, kind, lease=LEASE, needs=(INackable, IDeadLetterable, ILeaseExtendable)
        )
        for i in range(3):
            assert _add(q, kind, f"job-{i}".encode(), f"job-{i}")
        leases = [take_one(q)[1] for _ in range(3)]
        for i in range(3):
            assert q.cancel(f"job-{i}")
        assert q.nack(leases[0], 0) is True  # a retry that must not happen
        assert q.dead_letter(leases[1], "boom") is True  # not shelved either
        harness.advance(LEASE * 1.2)  # job-2's consumer died: its lease expires
        assert [_state(q, f"job-{i}") for i in range(3)] == ["cancelled"] * 3
        assert len(q) == 0 and q.dequeue_with_ack_id() is None
        assert q.dead_letters() == []

    def test_extend_lease_or_cancel_says_lost_for_a_lease_that_is_not_held(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind, lease=LEASE)
        assert q.extend_lease_or_cancel("no-such-ack-id") == "lost"
        assert _add(q, kind, b"a", "job-1")
        _, ack_id = take_one(q)
        assert q.extend_lease_or_cancel(ack_id) == "held"
        if ILeaseExtendable in self.extensions:
            harness.advance(LEASE * 0.6)
            assert q.extend_lease_or_cancel(ack_id) == "held"
            harness.advance(LEASE * 0.6)  # past the first deadline: renewed, so still held
            assert q.dequeue_with_ack_id() is None
            harness.advance(LEASE * 1.2)
            assert q.extend_lease_or_cancel(ack_id) == "lost"
        else:
            assert q.acknowledge(ack_id)
            assert q.extend_lease_or_cancel(ack_id) == "lost"

    # -- hearing of ends -------------------------------------------------------------------

    def test_a_record_subscriber_hears_every_end_through_another_object(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IJobRecords, IRecordSubscribable)
        name = fresh_name()
        listener = self.records(harness, kind, name)
        q = self.records(harness, kind, name)
        heard: set[str] = set()
        changed = threading.Condition()

        def on_end(job_id: str) -> None:
            with changed:
                heard.add(job_id)
                changed.notify_all()

        listener.subscribe_records(on_end)
        expected: set[str] = set()
        # Delivery may be lossy while a subscription starts up: end jobs until one is heard.
        for attempt in range(int(WAIT / 0.1)):
            job_id = f"warm-up-{attempt}"
            assert _add(q, kind, b"x", job_id)
            _, ack_id = take_one(q)
            assert q.acknowledge(ack_id)
            with changed:
                if changed.wait_for(lambda: job_id in heard, timeout=0.1):  # noqa: B023
                    break
        for job_id in ("ok", "failed", "cancelled"):
            assert _add(q, kind, job_id.encode(), job_id)
            expected.add(job_id)
        assert q.cancel("cancelled")
        _, ok = take_one(q)
        _, failed = take_one(q)
        assert q.acknowledge_with_results([(ok, b"1")]) == [True]
        assert q.fail(failed, b'{"type": "E"}')
        with changed:
            assert changed.wait_for(lambda: expected <= heard, timeout=WAIT), heard

    # -- after close, and while the storage cannot answer ------------------------------------

    def test_settles_with_an_outcome_work_after_close(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.records(harness, kind, name)
        observer = self.records(harness, kind, name)
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        _, a = take_one(q)
        _, b = take_one(q)
        q.close()
        assert q.acknowledge_with_results([(a, b"1")]) == [True]
        assert q.fail(b, b'{"type": "E"}') is True
        assert [_state(observer, j) for j in ("job-1", "job-2")] == ["succeeded", "failed"]

    def test_record_calls_while_the_storage_cannot_answer_raise_and_change_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        assert _add(q, kind, b"a", "job-1") and _add(q, kind, b"b", "job-2")
        _, ack_id = take_one(q)
        with self._storage_down(harness):
            try:
                seen = q.job_record("job-1")
            except (TypeError, ValueError):
                raise
            except Exception:
                seen = None  # cannot answer: raising is right
            else:
                # A storage that can still read (SQLite in WAL mode while another connection
                # holds the write lock) may answer, but only the truth.
                assert seen is not None and seen["state"] == "running", seen
        calls: list[Any] = [
            lambda: q.cancel("job-2"),
            lambda: q.acknowledge_with_results([(ack_id, b"1")]),
            lambda: q.fail(ack_id, b"{}"),
            lambda: q.extend_lease_or_cancel(ack_id),
        ]
        for call in calls:
            with self._storage_down(harness), pytest.raises(Exception) as raised:
                call()
            assert not isinstance(raised.value, TypeError | ValueError)
        assert _state(q, "job-1") == "running" and _state(q, "job-2") == "queued"
        assert q.acknowledge_with_results([(ack_id, b"1")]) == [True]

    # -- the worker on a queue with records -------------------------------------------------

    def test_a_result_worker_keeps_values_and_errors_for_any_process(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.records(harness, kind, name)
        elsewhere = self.records(harness, QueueKind(kind.priority, True), name)

        def halve(job: varmq.Job[int]) -> dict[str, float]:
            if job.data < 0:
                raise ValueError(f"negative: {job.data}")
            return {"half": job.data / 2}

        worker = varmq.new_result_worker(halve, 4)
        try:
            bind(worker, q, kind)
            producer = _producer(elsewhere, kind)
            for i in range(20):
                assert _add_job(producer, kind, i, f"job-{i}")
            assert _add_job(producer, kind, -1, "negative")
            for i in range(20):
                assert producer.result_of(f"job-{i}", timeout=WAIT) == {"half": i / 2}
            with pytest.raises(varmq.JobFailedError) as failed:
                producer.result_of("negative", timeout=WAIT)
            assert (failed.value.error_type, failed.value.message) == ("ValueError", "negative: -1")
            assert failed.value.state == "failed" and "halve" in failed.value.traceback
            record = producer.job("job-3")
            assert record is not None and record.state == "succeeded" and record.attempts == 1
            assert record.result == {"half": 1.5}
        finally:
            worker.stop_and_wait(timeout=WAIT)

    def test_a_value_json_cannot_hold_fails_its_job_with_a_clear_error(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.records(harness, kind)
        worker = varmq.new_result_worker(lambda job: {1, 2, 3}, 1)
        try:
            handle = bind(worker, q, kind)
            assert _add_job(handle, kind, None, "a-set")
            with pytest.raises(varmq.JobFailedError, match="ResultNotJSONError") as failed:
                handle.result_of("a-set", timeout=WAIT)
            assert "set" in failed.value.message and "JSON" in failed.value.message
        finally:
            worker.stop_and_wait(timeout=WAIT)
        errors = list(worker.errs().queue)
        assert len(errors) == 1 and isinstance(errors[0], varmq.ResultNotJSONError), errors

    def test_a_running_plain_job_cancelled_by_id_sees_job_cancelled_set(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.records(harness, kind, name, lease=LEASE)
        admin = _producer(self.records(harness, QueueKind(kind.priority, True), name), kind)
        started, saw_cancel = threading.Event(), threading.Event()

        def long_job(job: varmq.Job[str]) -> str:
            started.set()
            if job.cancelled.wait(WAIT):
                saw_cancel.set()
            return "finished anyway"

        worker = varmq.new_result_worker(long_job, 2)
        try:
            bind(worker, q, kind)
            assert _add_job(admin, kind, "x", "long")
            assert started.wait(WAIT)
            assert admin.cancel("long") is True
            assert saw_cancel.wait(WAIT), "the job never heard of its cancel"
            with pytest.raises(varmq.JobFailedError) as cancelled:
                admin.result_of("long", timeout=WAIT)
            assert cancelled.value.state == "cancelled"
            assert worker.wait(WAIT)
        finally:
            worker.stop_and_wait(timeout=WAIT)
        assert worker.errs().empty(), list(worker.errs().queue)  # a cancel is no job error
        assert worker.metrics.failed == 1 and worker.metrics.successful == 0

    def test_a_running_async_job_cancelled_by_id_is_cancelled(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.records(harness, kind, name, lease=LEASE)
        admin = _producer(self.records(harness, QueueKind(kind.priority, True), name), kind)
        started, interrupted = threading.Event(), threading.Event()

        async def long_job(job: varmq.Job[str]) -> str:
            started.set()
            try:
                await asyncio.sleep(WAIT * 4)
            except asyncio.CancelledError:
                interrupted.set()
                raise
            return "never"

        worker: varmq.ResultWorker[str, str] = varmq.new_result_worker(long_job, 2)
        try:
            bind(worker, q, kind)
            assert _add_job(admin, kind, "x", "long")
            assert started.wait(WAIT)
            assert admin.cancel("long") is True
            assert interrupted.wait(WAIT), "the coroutine was not cancelled"
            with pytest.raises(varmq.JobFailedError, match="cancelled while it ran"):
                admin.result_of("long", timeout=WAIT)
        finally:
            worker.stop_and_wait(timeout=WAIT)

    def test_a_worker_takes_no_job_ahead_so_a_cancel_answering_true_means_it_never_starts(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # cancel() answering True must mean the job does not start. A job taken ahead into a
        # worker's prefetch would be "running" in storage yet start later, after a cancel that
        # its worker hears of only at the next renewal; so on a queue with records a worker
        # takes jobs only for free slots (unless given a prefetch), and they start at once.
        self._cancel_behind_a_blocker(harness, kind, None, "queued")

    def test_a_job_in_an_explicit_prefetch_cancelled_meanwhile_never_starts(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # With prefetch=N a worker takes jobs ahead of a free slot; one that waited asks the
        # storage before it starts, so a cancel through another object, which its worker would
        # hear of only at its next renewal, still keeps it from starting.
        self._cancel_behind_a_blocker(harness, kind, 4, "running")

    def _cancel_behind_a_blocker(
        self, harness: StorageHarness, kind: QueueKind, prefetch: int | None, state: str
    ) -> None:
        """A worker of concurrency 1 runs a blocking job while a second job is in ``state``
        (``"queued"``: not taken; ``"running"``: taken ahead); cancelled through another
        object, the second job never starts."""
        name = fresh_name()
        q = self.records(harness, kind, name)  # LONG_LEASE: no renewal comes during the test
        admin = _producer(self.records(harness, QueueKind(kind.priority, True), name), kind)
        release, blocking = threading.Event(), threading.Event()
        started: list[str] = []

        def job_fn(job: varmq.Job[str]) -> None:
            started.append(job.data)
            if job.data == "blocker":
                blocking.set()
                release.wait(WAIT)

        worker = varmq.new_worker(job_fn, 1, prefetch=prefetch)
        try:
            assert _add_job(admin, kind, "blocker", "blocker")
            assert _add_job(admin, kind, "second", "second")
            handle = bind(worker, q, kind)
            assert blocking.wait(WAIT)
            deadline = time.monotonic() + WAIT
            while _state(q, "second") != state:
                assert time.monotonic() < deadline, f"second job: {_state(q, 'second')}"
                time.sleep(0.005)
            assert admin.cancel("second") is True
            release.set()
            with pytest.raises(varmq.JobFailedError, match="before it ran"):
                admin.result_of("second", timeout=WAIT)
            assert handle.result_of("blocker", timeout=WAIT) is None
        finally:
            release.set()
            worker.stop_and_wait(timeout=WAIT)
        assert started == ["blocker"]

    def test_a_run_that_raised_while_its_cancel_was_pending_keeps_its_error(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.records(harness, kind, name, needs=(INackable,))
        admin = _producer(self.records(harness, QueueKind(kind.priority, True), name), kind)
        started, go = threading.Event(), threading.Event()

        def job_fn(job: varmq.Job[str]) -> None:
            started.set()
            go.wait(WAIT)
            raise LookupError("it ran, and raised")

        # Attempts left: without the cancel it would be retried.
        worker = varmq.new_worker(job_fn, 1, retry=varmq.Retry(max_attempts=3, backoff=0.01))
        try:
            bind(worker, q, kind)
            assert _add_job(admin, kind, "x", "raiser")
            assert started.wait(WAIT)
            assert admin.cancel("raiser") is True  # heard by the worker at its next renewal
            go.set()
            with pytest.raises(varmq.JobFailedError, match="it ran, and raised") as ended:
                admin.result_of("raiser", timeout=WAIT)
        finally:
            go.set()
            worker.stop_and_wait(timeout=WAIT)
        assert (ended.value.state, ended.value.error_type) == ("cancelled", "LookupError")
        record = admin.job("raiser")
        assert (record.attempts, record.cancel_requested) == (1, True)

    def test_a_take_and_a_cancel_racing_decide_together_whether_the_job_starts(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # A consumer takes a queued job and asks extend_lease_or_cancel before starting it,
        # while another object cancels it. Whatever the interleaving, a cancel that answered
        # True before the consumer asked must be seen by the ask: the job does not start.
        self.require(ILeaseExtendable)
        name = fresh_name()
        consumer = self.records(harness, kind, name)
        admin = self.records(harness, kind, name)
        late = [
            job_id
            for job_id in (f"race-{round_}" for round_ in range(40))
            if _started_after_a_cancel(consumer, admin, kind, job_id)
        ]
        assert late == [], f"started after a cancel answered True: {late}"

    def test_a_schedule_mark_adds_each_occurrence_once_whatever_the_records_pruned(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IScheduleMarks)
        name = fresh_name()
        q = self.records(harness, kind, name, keep_results_limit=1)
        other = self.records(harness, kind, name, keep_results_limit=1)
        hour = 1_800_000_000.0
        assert q.enqueue_occurrence(b"o1", "report:1", "report", hour)
        assert other.enqueue_occurrence(b"o1", "report:1", "report", hour)  # another process
        assert drain(q) == [b"o1"]
        harness.advance(1)  # the other jobs end later: the occurrence's record is the oldest
        # Other jobs end: with keep_results_limit=1 the occurrence's record is pruned...
        for i in range(3):
            assert _add(q, kind, b"other", f"other-{i}")
        drain(q)
        assert q.job_record("report:1") is None
        # ...and yet the occurrence is not added again, nor any earlier one.
        assert other.enqueue_occurrence(b"o1", "report:1", "report", hour)
        assert other.enqueue_occurrence(b"o0", "report:0", "report", hour - 3600)
        assert len(q) == 0
        # A later occurrence is added, and another schedule has a mark of its own.
        assert other.enqueue_occurrence(b"o2", "report:2", "report", hour + 3600)
        assert q.enqueue_occurrence(b"x1", "cleanup:1", "cleanup", hour)
        assert sorted(drain(q)) == [b"o2", b"x1"]

    def test_enqueue_occurrence_checks_its_schedule_and_time(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IScheduleMarks)
        q = self.records(harness, kind)
        for schedule, occurrence, error in [
            ("", 1.0, ValueError),
            (5, 1.0, TypeError),
            ("s", float("nan"), ValueError),
            ("s", "1", TypeError),
            ("s", True, TypeError),
        ]:
            with pytest.raises(error, match=r"schedule=|occurrence="):
                q.enqueue_occurrence(b"x", "job", schedule, occurrence)
        assert len(q) == 0

    def test_a_schedule_runs_an_occurrence_once_after_its_record_was_pruned(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # Two workers (as two processes) declare one hourly schedule; between them other jobs
        # end and keep_results_limit prunes the occurrence's record. Before marks, the second
        # worker added the hour's occurrence again and it ran twice.
        self.require(IScheduleMarks)
        name = fresh_name()
        runs: list[str] = []
        ran = threading.Event()

        def job_fn(job: varmq.Job[Any]) -> None:
            runs.append(job.id)
            ran.set()

        first = varmq.new_worker(job_fn, 2)
        try:
            handle = bind(first, self.records(harness, kind, name, keep_results_limit=2), kind)
            first.schedule(f"hourly-{name}", every=3600, queue=handle)
            assert ran.wait(WAIT)
            for i in range(4):
                assert _add_job(handle, kind, "other", f"other-{i}")
            assert first.wait(WAIT)
            assert sum(run.startswith("hourly") for run in runs) == 1
            second = varmq.new_worker(job_fn, 2)
            try:
                other = bind(second, self.records(harness, kind, name), kind)
                schedule = second.schedule(f"hourly-{name}", every=3600, queue=other)
                deadline = time.monotonic() + WAIT
                while schedule.last_fired is None:  # it fired (and the add was refused)
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                time.sleep(0.3)  # the add is on a producer thread: give a second run its time
                assert second.wait(WAIT) and first.wait(WAIT)
            finally:
                second.stop_and_wait(timeout=WAIT)
        finally:
            first.stop_and_wait(timeout=WAIT)
        assert sum(run.startswith("hourly") for run in runs) == 1, runs

    def test_err_and_result_workers_refuse_a_queue_without_records(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IJobRecords,))
        for make in (varmq.new_err_worker, varmq.new_result_worker):
            worker = make(lambda job: None, 1, auto_run=False)
            with pytest.raises(ValueError, match="keep_results"):
                bind(worker, q, kind)
            plain = varmq.new_worker(lambda job: None, 1, auto_run=False)
            handle = bind(plain, q, kind)  # a plain worker needs no records
            with pytest.raises(ValueError, match="keep_results"):
                handle.job("x")

    @contextlib.contextmanager
    def _storage_down(self, harness: StorageHarness) -> Iterator[None]:
        outage = getattr(harness, "outage", None)
        if outage is None:
            pytest.skip("the harness cannot take the storage away (no outage)")
        with outage():
            yield


def _started_after_a_cancel(consumer: Any, admin: Any, kind: QueueKind, job_id: str) -> bool:
    """Race a take (then the ask before starting, ``extend_lease_or_cancel``) against a cancel
    of one queued job; whether the job would start although the cancel had answered ``True``
    before the ask was made."""
    assert _add(consumer, kind, b"x", job_id)
    barrier = threading.Barrier(2)
    asked: dict[str, Any] = {}
    answered: dict[str, Any] = {}

    def start() -> None:
        barrier.wait()
        taken = consumer.dequeue_with_ack_id()
        if taken is None:
            return  # the cancel removed it first
        asked["at"] = time.monotonic()
        asked["answer"] = consumer.extend_lease_or_cancel(taken[1])
        if asked["answer"] == "cancel":
            consumer.fail(taken[1], b'{"type": "JobCancelledError"}')
        else:
            consumer.acknowledge(taken[1])

    def cancel() -> None:
        barrier.wait()
        answered["value"] = admin.cancel(job_id)
        answered["at"] = time.monotonic()

    threads = [threading.Thread(target=start), threading.Thread(target=cancel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    return bool(
        answered["value"] and asked.get("answer") == "held" and asked["at"] > answered["at"]
    )


def _producer(q: Any, kind: QueueKind) -> Any:
    """A producer-only handle on the distributed queue ``q``."""
    if kind.priority:
        return varmq.new_distributed_priority_queue(q)
    return varmq.new_distributed_queue(q)


def _add_job(handle: Any, kind: QueueKind, data: Any, job_id: str) -> bool:
    """``handle.add`` with ``job_id`` (priority 0 on priority queues)."""
    if kind.priority:
        return bool(handle.add(data, 0, job_id=job_id))
    return bool(handle.add(data, job_id=job_id))
