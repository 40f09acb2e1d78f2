"""The storage conformance suite: the tests every queue storage passes, ours and anyone's.

Written only against ``varmq.protocols``; it never looks at how a storage works inside. To run
it on a storage, subclass :class:`QueueConformance` in a test module, in a class whose name starts
with ``Test`` so pytest collects it, and give it a harness::

    from varmq.testing.conformance import QueueConformance, StorageHarness

    class TestMyStorage(QueueConformance):
        def make_harness(self) -> StorageHarness:
            return MyHarness()        # opens queues on a fresh (or shared) store

The harness (:class:`StorageHarness`) has three methods:

``new_queue(name, *, priority, distributed, visibility_timeout)``
    Open the queue ``name`` of that kind (``priority``: the ``enqueue(item, priority)`` shape;
    ``distributed``: with ``subscribe``) whose leases last ``visibility_timeout`` seconds. Called
    twice with one name, it returns two objects on the same stored queue, as two processes
    would have. Every test uses fresh names, so a shared server needs no flushing.
    A storage that claims ``IDeadLetterable`` also takes the keyword options
    ``dead_letter_limit`` and ``dead_letter_max_age`` and passes them to its queue.
``advance(seconds)``
    Let lease and delay time pass: move the storage's fake clock, or ``time.sleep`` when it has
    none. The suite uses leases and delays of 0.5 s and advances 0.3 s or 0.6 s at a time.
``close()``
    Close everything the harness opened; called once after each test.

The fixture ``harness`` makes one per test and closes it. A subclass that needs other fixtures
(``tmp_path``, a server started once per session) overrides the ``harness`` fixture instead of
``make_harness``. Tests run on each of the four kinds of queue (``queue``, ``priority_queue``,
``distributed_queue``, ``distributed_priority_queue``) that their claim applies to. A storage that
does not implement an extension protocol (batch takes, delivery counts, ``acknowledge_many``,
dedup, leases) narrows the class attribute ``extensions``; one that also implements
``ICapacitySetter`` or the retry protocols (``RETRY_EXTENSIONS``: delayed enqueue, nack, dead
letters, stats) widens it, up to ``ALL_EXTENSIONS``. The tests of the protocols left out are
skipped; the ones kept are checked with ``isinstance``. The retry tests live in
``varmq.testing.conformance_retries`` (``RetryConformance``), which ``QueueConformance`` inherits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from varmq.protocols import (
    IBatchAcknowledgeable,
    ICapacitySetter,
    ICountedDelivery,
    IDeadLetterable,
    IDedupQueue,
    IDelayedEnqueue,
    IDistributedPriorityQueue,
    IDistributedQueue,
    ILeaseExtendable,
    IMultiAcknowledgeable,
    INackable,
    IPersistentPriorityQueue,
    IPersistentQueue,
    IQueueStats,
)
from varmq.testing._suite import (
    ALL_KINDS,
    DISTRIBUTED_KINDS,
    FIFO_KINDS,
    LEASE,
    LONG_LEASE,
    PRIORITY_KINDS,
    WAIT,
    QueueKind,
    StorageHarness,
)
from varmq.testing._suite import drain as _drain
from varmq.testing._suite import fresh_name as _fresh_name
from varmq.testing._suite import kinds as _kinds
from varmq.testing._suite import put as _put
from varmq.testing._suite import take as _take
from varmq.testing.conformance_retries import RetryConformance

__all__ = [
    "ALL_EXTENSIONS",
    "DEFAULT_EXTENSIONS",
    "RETRY_EXTENSIONS",
    "QueueConformance",
    "QueueKind",
    "StorageHarness",
]

DEFAULT_EXTENSIONS: tuple[type, ...] = (
    IBatchAcknowledgeable,
    ICountedDelivery,
    IMultiAcknowledgeable,
    IDedupQueue,
    ILeaseExtendable,
)
"""The optional protocols a storage claims unless it says otherwise: those the worker relies on
for batching, retries, dedup and long jobs, and that ``sqliteq`` and ``redisq`` implement."""
RETRY_EXTENSIONS: tuple[type, ...] = (IDelayedEnqueue, INackable, IDeadLetterable, IQueueStats)
"""The protocols of delayed jobs, retries, dead letters and stats (tests in
``conformance_retries``). Not in ``DEFAULT_EXTENSIONS``: a storage claims them once it has them."""
ALL_EXTENSIONS: tuple[type, ...] = (*DEFAULT_EXTENSIONS, ICapacitySetter, *RETRY_EXTENSIONS)
"""Every optional protocol the suite knows how to test."""


class QueueConformance(RetryConformance):
    """The conformance tests; subclass with a ``Test*`` name and implement ``make_harness``."""

    extensions: ClassVar[tuple[type, ...]] = DEFAULT_EXTENSIONS
    """The optional protocols this storage implements; the tests of the others are skipped.

    Narrow it when your storage lacks one; widen it with ``ICapacitySetter`` and
    ``RETRY_EXTENSIONS`` when it implements them (``ALL_EXTENSIONS`` is every one).
    """

    def make_harness(self) -> StorageHarness:
        """Return a fresh harness for one test."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_harness()")

    @pytest.fixture
    def harness(self) -> Iterator[StorageHarness]:
        """One harness per test, closed afterwards."""
        made = self.make_harness()
        try:
            yield made
        finally:
            made.close()

    def open(
        self,
        harness: StorageHarness,
        kind: QueueKind,
        name: str | None = None,
        lease: float = LONG_LEASE,
    ) -> Any:
        """Open a queue of ``kind``; a fresh unique name unless ``name`` is given."""
        return harness.new_queue(
            name or _fresh_name(),
            priority=kind.priority,
            distributed=kind.distributed,
            visibility_timeout=lease,
        )

    def require(self, *protocols: type) -> None:
        """Skip the calling test unless the storage claims every one of ``protocols``."""
        for protocol in protocols:
            if protocol not in self.extensions:
                pytest.skip(f"storage does not claim {protocol.__name__}")

    # -- the protocols of each kind -------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_queue_implements_the_protocols_of_its_kind(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        expected: dict[QueueKind, type] = {
            QueueKind(False, False): IPersistentQueue,
            QueueKind(True, False): IPersistentPriorityQueue,
            QueueKind(False, True): IDistributedQueue,
            QueueKind(True, True): IDistributedPriorityQueue,
        }
        for protocol in (expected[kind], *self.extensions):
            assert isinstance(q, protocol), (
                f"{kind} does not implement {protocol.__name__}; implement it, or leave it out"
                f" of {type(self).__name__}.extensions"
            )

    # -- order ----------------------------------------------------------------------------------

    @_kinds(FIFO_KINDS)
    def test_fifo_queue_hands_jobs_out_in_enqueue_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        items = [f"job-{i}".encode() for i in range(50)]
        for item in items:
            assert q.enqueue(item)
        assert _drain(q) == items

    @_kinds(PRIORITY_KINDS)
    def test_priority_queue_hands_lower_priorities_out_first(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        jobs = [(5, b"five"), (-3, b"minus-three"), (2**31 - 1, b"max"), (0, b"zero")]
        jobs += [(-(2**31), b"min"), (1_000_000, b"million"), (1, b"one")]
        for priority, item in jobs:
            assert q.enqueue(item, priority)
        assert _drain(q) == [item for _, item in sorted(jobs)]

    @_kinds(PRIORITY_KINDS)
    def test_priority_queue_keeps_fifo_order_among_equal_priorities(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for i in range(30):
            assert q.enqueue(f"{i % 3}-{i}".encode(), i % 3)
        expected = [f"{p}-{i}".encode() for p in range(3) for i in range(30) if i % 3 == p]
        assert _drain(q) == expected

    @_kinds(ALL_KINDS)
    def test_taken_job_is_the_bytes_stored_with_a_str_ack_id(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        envelope = b'{"id": "job-1", "status": "Created", "data": "h\\u00e9"}'
        binary = bytes(range(256)) * 4  # NUL bytes and bytes that are not UTF-8
        large = b"x" * 300_000
        for item in (envelope, binary, large, b""):
            assert _put(q, kind, item)
            taken = q.dequeue_with_ack_id()
            assert taken is not None
            assert type(taken[0]) is bytes and taken[0] == item
            assert isinstance(taken[1], str) and taken[1]
            assert q.acknowledge(taken[1])

    @_kinds(ALL_KINDS)
    def test_identical_payloads_are_distinct_jobs(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"same")
        assert _put(q, kind, b"same")
        assert len(q) == 2
        first, second = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
        assert first is not None and second is not None
        assert first[0] == second[0] == b"same"
        assert first[1] != second[1]
        assert q.acknowledge(first[1]) and q.acknowledge(second[1])

    @_kinds(ALL_KINDS)
    @pytest.mark.parametrize("item", [12345, 1.5, {"id": "x"}, ["x"], None, object()], ids=repr)
    def test_enqueue_refuses_items_that_are_not_bytes_or_str(
        self, harness: StorageHarness, kind: QueueKind, item: Any
    ) -> None:
        q = self.open(harness, kind)
        try:
            refused = not _put(q, kind, item)
        except TypeError:
            refused = True
        assert refused, f"{kind} stored {item!r}"
        assert len(q) == 0

    # -- taking and acknowledging ----------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_take_from_an_empty_queue_returns_none(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert q.dequeue_with_ack_id() is None
        assert q.dequeue() is None

    @_kinds(ALL_KINDS)
    def test_dequeue_without_a_lease_removes_the_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"a") and _put(q, kind, b"b")
        assert q.dequeue() == b"a"
        assert len(q) == 1
        assert q.dequeue() == b"b"
        assert q.dequeue() is None

    @_kinds(ALL_KINDS)
    def test_acknowledged_job_is_not_taken_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and taken[0] == b"a"
        assert q.acknowledge(taken[1]) is True
        assert len(q) == 0
        assert q.dequeue_with_ack_id() is None

    @_kinds(ALL_KINDS)
    def test_acknowledged_job_does_not_come_back_when_its_lease_would_have_expired(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        harness.advance(LEASE * 1.2)
        assert len(q) == 0
        assert q.dequeue_with_ack_id() is None

    @_kinds(ALL_KINDS)
    def test_acknowledge_of_an_unknown_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"a")
        assert q.acknowledge("no-such-ack-id") is False
        assert q.acknowledge("") is False
        assert len(q) == 1

    @_kinds(ALL_KINDS)
    def test_second_acknowledge_of_one_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.acknowledge(taken[1]) is True
        assert q.acknowledge(taken[1]) is False

    @_kinds(ALL_KINDS)
    def test_len_and_values_leave_out_jobs_in_flight(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for item in (b"a", b"b", b"c"):
            assert _put(q, kind, item)
        assert len(q) == 3
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert len(q) == 2
        assert q.values() == [b"b", b"c"]
        assert q.acknowledge(taken[1])
        assert len(q) == 2

    @_kinds(ALL_KINDS)
    def test_values_lists_waiting_jobs_in_take_order_without_taking_them(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for priority, item in [(3, b"c"), (1, b"a"), (3, b"d"), (2, b"b")]:
            assert _put(q, kind, item, priority)
        expected = [b"a", b"b", b"c", b"d"] if kind.priority else [b"c", b"a", b"d", b"b"]
        assert q.values() == expected
        assert q.values() == expected
        assert len(q) == 4
        assert _drain(q) == expected

    @_kinds(ALL_KINDS)
    def test_purge_removes_every_waiting_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for item in (b"a", b"b", b"c"):
            assert _put(q, kind, item)
        q.purge()
        assert len(q) == 0
        assert q.values() == []
        assert q.dequeue_with_ack_id() is None
        assert _put(q, kind, b"after")
        assert _take(q) == b"after"

    # -- closing -----------------------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_closed_queue_refuses_enqueue(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind)
        q.close()
        assert _put(q, kind, b"late") is False

    @_kinds(ALL_KINDS)
    def test_closed_queue_hands_out_no_jobs(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"a")
        q.close()
        assert q.dequeue_with_ack_id() is None
        assert q.dequeue() is None
        if IBatchAcknowledgeable in self.extensions:
            assert q.dequeue_batch_with_ack_ids(5) == []

    @_kinds(ALL_KINDS)
    def test_closed_queue_still_accepts_acks_of_jobs_taken_before(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert _put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        q.close()
        assert q.acknowledge(taken[1]) is True

    # -- several queue objects -------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_two_queue_objects_on_one_name_share_jobs(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = _fresh_name()
        first, second = self.open(harness, kind, name), self.open(harness, kind, name)
        assert _put(first, kind, b"a") and _put(first, kind, b"b")
        assert len(second) == 2
        assert _take(second) == b"a"
        assert _take(first) == b"b"
        assert _take(first) is None and _take(second) is None

    @_kinds(ALL_KINDS)
    def test_queues_with_different_names_are_independent(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        one, other = self.open(harness, kind), self.open(harness, kind)
        assert _put(one, kind, b"a")
        assert len(other) == 0
        assert _take(other) is None
        assert _take(one) == b"a"

    @_kinds(ALL_KINDS)
    def test_concurrent_takes_through_several_objects_deliver_each_job_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = _fresh_name()
        objects = [self.open(harness, kind, name) for _ in range(4)]
        items = [f"job-{i}".encode() for i in range(200)]
        for item in items:
            assert _put(objects[0], kind, item)
        taken: list[list[bytes]] = [[] for _ in objects]
        errors: list[BaseException] = []

        def consume(q: Any, into: list[bytes]) -> None:
            try:
                into.extend(_drain(q))
            except BaseException as error:  # reported by the test thread below
                errors.append(error)

        threads = [
            threading.Thread(target=consume, args=(q, into), name=f"conformance-consumer-{i}")
            for i, (q, into) in enumerate(zip(objects, taken, strict=True))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        assert sorted(item for part in taken for item in part) == sorted(items)

    # -- leases ----------------------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_lease_seconds_is_the_visibility_timeout(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert q.lease_seconds == pytest.approx(LEASE)

    @_kinds(ALL_KINDS)
    def test_expired_lease_makes_the_job_available_again_with_a_new_ack_id(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"a")
        first = q.dequeue_with_ack_id()
        assert first is not None
        assert q.dequeue_with_ack_id() is None
        harness.advance(LEASE * 1.2)
        again = q.dequeue_with_ack_id()
        assert again is not None
        assert again[0] == b"a"
        assert again[1] != first[1]
        assert q.acknowledge(again[1]) is True

    @_kinds(FIFO_KINDS)
    def test_expired_job_returns_to_its_place_in_line(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert q.enqueue(b"a") and q.enqueue(b"b")
        assert _take(q) == b"a"
        assert q.enqueue(b"c")
        harness.advance(LEASE * 1.2)
        assert _drain(q) == [b"a", b"b", b"c"]

    @_kinds(PRIORITY_KINDS)
    def test_expired_job_returns_with_its_priority_and_place(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert q.enqueue(b"a", 2) and q.enqueue(b"b", 2)
        assert _take(q) == b"a"
        assert q.enqueue(b"c", 2) and q.enqueue(b"late", 3) and q.enqueue(b"urgent", 1)
        harness.advance(LEASE * 1.2)
        assert _drain(q) == [b"urgent", b"a", b"b", b"c", b"late"]

    @_kinds(ALL_KINDS)
    def test_redelivery_after_an_expired_lease_counts_as_attempt_two(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable, ICountedDelivery)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"a")
        [(item, _, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 1)
        harness.advance(LEASE * 1.2)
        [(item, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 2)
        assert q.acknowledge(ack_id)

    @_kinds(ALL_KINDS)
    def test_stale_ack_id_is_refused_once_the_job_was_taken_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"a")
        stale = q.dequeue_with_ack_id()
        assert stale is not None
        harness.advance(LEASE * 1.2)
        fresh = q.dequeue_with_ack_id()
        assert fresh is not None
        assert q.acknowledge(stale[1]) is False
        assert q.extend_lease(stale[1]) is False
        assert q.extend_lease(fresh[1]) is True
        assert q.acknowledge(fresh[1]) is True

    @_kinds(ALL_KINDS)
    def test_expired_ack_id_is_refused_and_the_job_is_kept(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"a")
        expired = q.dequeue_with_ack_id()
        assert expired is not None
        harness.advance(LEASE * 1.2)
        assert q.extend_lease(expired[1]) is False
        assert q.acknowledge(expired[1]) is False
        assert _take(q) == b"a"

    @_kinds(ALL_KINDS)
    def test_extend_lease_keeps_a_job_leased_past_its_first_deadline(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        harness.advance(LEASE * 0.6)
        assert q.extend_lease(taken[1]) is True
        harness.advance(LEASE * 0.6)
        assert q.dequeue_with_ack_id() is None
        assert q.acknowledge(taken[1]) is True

    @_kinds(ALL_KINDS)
    def test_extend_lease_of_an_unknown_or_acknowledged_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = self.open(harness, kind)
        assert q.extend_lease("no-such-ack-id") is False
        assert _put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        assert q.extend_lease(taken[1]) is False

    # -- batch takes -------------------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_batch_take_returns_at_most_n_jobs_in_order_with_distinct_ack_ids(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IBatchAcknowledgeable)
        q = self.open(harness, kind)
        items = [f"job-{i}".encode() for i in range(5)]
        for item in items:
            assert _put(q, kind, item)
        batch = q.dequeue_batch_with_ack_ids(3)
        assert [item for item, _ in batch] == items[:3]
        assert len({ack_id for _, ack_id in batch}) == 3
        assert len(q) == 2
        assert all(q.acknowledge(ack_id) for _, ack_id in batch)

    @_kinds(ALL_KINDS)
    def test_batch_take_returns_fewer_jobs_when_fewer_are_ready(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IBatchAcknowledgeable)
        q = self.open(harness, kind)
        assert _put(q, kind, b"a") and _put(q, kind, b"b")
        assert [item for item, _ in q.dequeue_batch_with_ack_ids(10)] == [b"a", b"b"]
        assert q.dequeue_batch_with_ack_ids(10) == []

    @_kinds(ALL_KINDS)
    def test_batch_take_from_an_empty_queue_returns_an_empty_list(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IBatchAcknowledgeable)
        q = self.open(harness, kind)
        assert q.dequeue_batch_with_ack_ids(4) == []

    @_kinds(ALL_KINDS)
    def test_batch_take_with_attempts_counts_a_first_delivery_as_one(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ICountedDelivery)
        q = self.open(harness, kind)
        for item in (b"a", b"b", b"c"):
            assert _put(q, kind, item)
        batch = q.dequeue_batch_with_attempts(2)
        assert [(item, attempt) for item, _, attempt in batch] == [(b"a", 1), (b"b", 1)]
        assert batch[0][1] != batch[1][1]
        assert q.dequeue_batch_with_attempts(5)[0][0] == b"c"
        assert q.dequeue_batch_with_attempts(5) == []

    # -- acknowledge_many --------------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_acknowledge_many_returns_one_result_per_ack_id_in_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IMultiAcknowledgeable)
        q = self.open(harness, kind)
        for item in (b"a", b"b", b"c"):
            assert _put(q, kind, item)
        a, b = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
        assert a is not None and b is not None
        results = q.acknowledge_many([a[1], "no-such-ack-id", b[1], a[1]])
        assert results == [True, False, True, False]
        assert q.acknowledge_many([]) == []
        assert q.values() == [b"c"]

    # -- dedup -------------------------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_dedup_stores_a_repeated_job_id_once_while_it_waits(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDedupQueue)
        q = self.open(harness, kind)
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"first", "job-1", priority) is True
        assert q.enqueue_dedup(b"second", "job-1", priority) is True
        assert q.values() == [b"first"]

    @_kinds(ALL_KINDS)
    def test_dedup_stores_a_repeated_job_id_once_while_it_is_in_flight(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDedupQueue)
        q = self.open(harness, kind)
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"first", "job-1", priority)
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.enqueue_dedup(b"second", "job-1", priority) is True
        assert len(q) == 0
        assert q.acknowledge(taken[1])

    @_kinds(ALL_KINDS)
    def test_dedup_stores_a_job_id_again_once_the_first_was_acknowledged(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDedupQueue)
        q = self.open(harness, kind)
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"first", "job-1", priority)
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        assert q.enqueue_dedup(b"again", "job-1", priority) is True
        assert q.values() == [b"again"]

    @_kinds(ALL_KINDS)
    def test_dedup_keeps_jobs_with_different_ids_apart(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDedupQueue)
        q = self.open(harness, kind)
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"same", "job-1", priority)
        assert q.enqueue_dedup(b"same", "job-2", priority)
        assert len(q) == 2

    @_kinds(PRIORITY_KINDS)
    def test_dedup_honours_the_priority(self, harness: StorageHarness, kind: QueueKind) -> None:
        self.require(IDedupQueue)
        q = self.open(harness, kind)
        assert q.enqueue_dedup(b"later", "job-1", 5)
        assert q.enqueue_dedup(b"sooner", "job-2", -5)
        assert q.values() == [b"sooner", b"later"]

    # -- capacity ----------------------------------------------------------------------------------

    @_kinds(ALL_KINDS)
    def test_set_capacity_refuses_enqueues_once_that_many_jobs_wait(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ICapacitySetter)
        q = self.open(harness, kind)
        q.set_capacity(2)
        assert _put(q, kind, b"a") and _put(q, kind, b"b")
        assert _put(q, kind, b"c") is False
        assert q.values() == [b"a", b"b"]
        assert _take(q) == b"a"
        assert _put(q, kind, b"c") is True
        q.set_capacity(0)
        assert _put(q, kind, b"d") is True

    # -- distributed queues ------------------------------------------------------------------------

    @_kinds(DISTRIBUTED_KINDS)
    def test_subscriber_hears_enqueued_when_another_object_adds_a_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = _fresh_name()
        listener, producer = self.open(harness, kind, name), self.open(harness, kind, name)
        heard: list[str] = []
        event = threading.Event()

        def on_message(message: str) -> None:
            heard.append(message)
            event.set()

        listener.subscribe(on_message)
        # Delivery may be lossy while a subscription starts up: add jobs until one is heard.
        for attempt in range(int(WAIT / 0.1)):
            assert _put(producer, kind, f"job-{attempt}".encode())
            if event.wait(timeout=0.1):
                break
        assert event.is_set(), "the subscriber heard nothing"
        assert set(heard) == {"enqueued"}

    # -- the worker on this storage ----------------------------------------------------------------

    # The worker on this storage: what a user of the storage sees end to end. Jobs are added
    # through the worker's handle (JSON envelopes), run once each, and acknowledged.

    @_kinds(ALL_KINDS)
    def test_worker_drains_ten_thousand_jobs_exactly_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        import varmq  # the suite's other tests need only the protocols

        q = self.open(harness, kind)
        total = 10_000
        seen: list[int] = []
        seen_lock = threading.Lock()

        def record(job: varmq.Job[int]) -> None:
            with seen_lock:
                seen.append(job.data)

        worker = varmq.new_worker(record, 8, auto_run=False)
        handle = _bind(worker, q, kind)
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

    @_kinds(ALL_KINDS)
    def test_worker_bound_after_start_runs_jobs_already_stored(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        import varmq

        name = _fresh_name()
        stored = self.open(harness, QueueKind(kind.priority, True), name)
        if kind.priority:
            assert varmq.new_distributed_priority_queue(stored).add("early", 1)
        else:
            assert varmq.new_distributed_queue(stored).add("early")
        done = threading.Event()
        worker = varmq.new_worker(lambda job: done.set(), 2, poll_interval=60.0)
        try:
            _bind(worker, self.open(harness, kind, name), kind)
            assert done.wait(WAIT), "a job stored before the bind was not run"
        finally:
            worker.stop_and_wait(timeout=WAIT)

    @_kinds(ALL_KINDS)
    def test_worker_reports_bytes_that_are_not_a_job_and_dead_letters_them_in_the_end(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        import time

        import varmq

        self.require(ICountedDelivery, IDeadLetterable)
        q = self.open(harness, kind, lease=LEASE)
        assert _put(q, kind, b"\xff\xfe not a job")
        ran = threading.Event()
        worker = varmq.new_worker(lambda job: ran.set(), 2, poll_interval=0.05, poison_limit=2)
        try:
            handle = _bind(worker, q, kind)
            assert handle.add("good", 1) if kind.priority else handle.add("good")
            assert ran.wait(WAIT), "a job behind the corrupt bytes did not run"
            assert worker.wait(WAIT)  # "good" is acknowledged before any lease time passes
            deadline, seen = time.monotonic() + WAIT, 0
            while not handle.dead_letters():
                assert time.monotonic() < deadline, "the corrupt bytes were never dead-lettered"
                reported = sum(isinstance(e, varmq.ParseJobError) for e in worker.errs().queue)
                if reported > seen:  # delivered once more: let its lease run out
                    seen = reported
                    harness.advance(LEASE + 0.1)
                time.sleep(0.01)
            [letter] = handle.dead_letters()
            assert (letter.data, letter.attempts) == (b"\xff\xfe not a job", 2), letter
            assert worker.is_active  # nothing crashed
        finally:
            worker.stop_and_wait(timeout=WAIT)
        errors = list(worker.errs().queue)
        assert errors and all(isinstance(e, varmq.ParseJobError) for e in errors), errors

    def test_worker_acknowledges_only_after_the_function_returned(
        self, harness: StorageHarness
    ) -> None:
        import varmq

        kind = QueueKind(False, False)
        name = _fresh_name()
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


def _bind(worker: Any, q: Any, kind: QueueKind) -> Any:
    """Bind ``q`` to ``worker`` with the ``with_*`` method of its kind."""
    if kind.distributed:
        if kind.priority:
            return worker.with_distributed_priority_queue(q)
        return worker.with_distributed_queue(q)
    if kind.priority:
        return worker.with_persistent_priority_queue(q)
    return worker.with_persistent_queue(q)
